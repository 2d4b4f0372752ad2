package caddymodule

import (
	"context"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// This file is what a sender that goes away, or an answer that breaks off,
// does to a send and a refund.

// refundIfAborted, deferred around the next handler, refunds when it
// panics after writing a status that refund_on names, then lets the panic
// go on: reverse_proxy panics with http.ErrAbortHandler when an answer's
// body breaks off after its status went out, and the upstream said that
// status all the same.
func (h *Handler) refundIfAborted(next *passOn, status func() int, refund func()) {
	if p := recover(); p != nil {
		if s := status(); s != 0 && matchesAny(h.refundOn, s) && !next.cut {
			refund()
		}
		panic(p)
	}
}

// hangUpGrace is how long a send's upstream call may go on once its
// sender has hung up: the gateway has the whole request (or passes on
// what the sender streams), so the send goes on as if the sender waited
// for its answer, and is counted, refunded or not as its answer says. A
// fire-and-forget sender that closes right after its request had it
// counted and, often, never delivered: Go's server notices the close as
// soon as the body is read (the cap reads it first), and reverse_proxy
// gave up on the sender gone. The bound keeps a hung upstream from
// holding the call for ever, which the sender's going away used to end.
const hangUpGrace = 30 * time.Second

// passOn is the next handler (the upstream's proxy) as a cap set passes a
// request on to it, and whether the call was cut off. One is made for
// each request.
type passOn struct {
	next caddyhttp.Handler
	// cut reports that the upstream call was cut off, once it returned:
	// it ran past hangUpGrace after its sender went away. Its send stays
	// counted, whatever the proxy made of it (reverse_proxy writes 499,
	// which refund_on 4xx would match), since the upstream may have the
	// message and send it.
	cut bool
}

// ServeHTTP passes the request on, as the type says.
func (p *passOn) ServeHTTP(w http.ResponseWriter, r *http.Request) error {
	// Deferred, so that it is set before a panic (http.ErrAbortHandler)
	// reaches refundIfAborted.
	defer func() { p.cut = r.Context().Err() != nil }()
	return p.next.ServeHTTP(w, r)
}

// passing is a request as the cap sets decide and pass it on: with a
// context that its sender's going away ends only hangUpGrace later.
// Every request makes one, so it is one object, not closures.
type passing struct {
	grace time.Duration
	cut   context.CancelFunc
	stop  func() bool // stops watching the sender
}

// passedOn returns r as its cap sets decide and pass it on (see
// passing), and the passing to release once it is served (nil where a
// cap set before this one, in the same route, made it).
func passedOn(r *http.Request) (*http.Request, *passing) { return passedOnWithin(r, hangUpGrace) }

// passedOnWithin is passedOn with the grace given.
func passedOnWithin(r *http.Request, grace time.Duration) (*http.Request, *passing) {
	sender := r.Context()
	if caddyhttp.GetVar(sender, passingVar) == sender {
		return r, nil
	}
	p := &passing{grace: grace}
	ctx, cut := context.WithCancel(context.WithoutCancel(sender))
	p.cut = cut
	p.stop = context.AfterFunc(sender, p.senderGone)
	caddyhttp.SetVar(ctx, passingVar, ctx)
	return r.WithContext(ctx), p
}

// passingVar is the request variable that holds the context passedOn
// made, so that the cap sets after the first take it as it is: one grace
// for the request.
const passingVar = "freqcap.passing"

// senderGone runs when the sender goes away: the call is cut off grace
// later (release stops it sooner).
func (p *passing) senderGone() { time.AfterFunc(p.grace, p.cut) }

// release ends the context at once, the request served; nil does
// nothing.
func (p *passing) release() {
	if p != nil {
		p.stop()
		p.cut()
	}
}
