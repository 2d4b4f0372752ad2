package caddymodule

import (
	"context"
	"errors"
	"net/http"
	"sync/atomic"
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
func (h *Handler) refundIfAborted(r *http.Request, status func() int, refund func()) {
	if p := recover(); p != nil {
		if s := status(); s != 0 && matchesAny(h.refundOn, s) && !cutOff(r) {
			refund()
		}
		panic(p)
	}
}

// hangUpGrace is how long an admitted send's upstream call may go on once
// its sender has hung up: the gateway has the whole request (or passes on
// what the sender streams), so the send goes on as if the sender waited
// for its answer, and is counted, refunded or not as its answer says. A
// fire-and-forget sender that closes right after its request had it
// counted and, half the time, never delivered: reverse_proxy gave up on
// it, having found the sender gone. The bound keeps a hung upstream from
// holding the call for ever, which the sender's going away used to end.
const hangUpGrace = 30 * time.Second

// passedOn returns r with a context that its sender's going away ends
// only hangUpGrace later (see hangUpGrace), for deciding and passing on,
// and the func that releases it once the request is served.
func passedOn(r *http.Request) (*http.Request, func()) { return passedOnWithin(r, hangUpGrace) }

// passedOnWithin is passedOn with the grace given.
func passedOnWithin(r *http.Request, grace time.Duration) (*http.Request, func()) {
	if caddyhttp.GetVar(r.Context(), passingVar) == r.Context() {
		// A cap set before this one passed it on already: one grace
		// for the request, not one more for each cap set.
		return r, func() {}
	}
	p := &passing{grace: grace}
	var ctx context.Context
	ctx, p.cut = context.WithCancel(context.WithoutCancel(r.Context()))
	p.stop = context.AfterFunc(r.Context(), p.senderGone)
	caddyhttp.SetVar(ctx, passingVar, ctx)
	return r.WithContext(ctx), p.release
}

// passingVar is the request variable that holds the context passedOn made,
// so that the cap sets after the first (a route with two frequency_cap
// directives) take it as it is.
const passingVar = "freqcap.passing"

// passing is one request's passedOn: one object rather than closures,
// since every request makes one.
type passing struct {
	grace time.Duration
	cut   context.CancelFunc
	stop  func() bool // stops watching the sender
	timer atomic.Pointer[time.Timer]
}

// senderGone runs when the sender goes away: the call is cut off grace
// later.
func (p *passing) senderGone() { p.timer.Store(time.AfterFunc(p.grace, p.cut)) }

// release ends the context at once, the request served.
func (p *passing) release() {
	if !p.stop() {
		if t := p.timer.Load(); t != nil {
			t.Stop()
		}
	}
	p.cut()
}

// cutOff reports whether the call to the upstream was cut off: its sender
// went away more than hangUpGrace before its answer. Its send stays
// counted, whatever the proxy then made of it (reverse_proxy writes 499,
// which refund_on 4xx would match), since the upstream may have the
// message and send it.
func cutOff(r *http.Request) bool { return errors.Is(r.Context().Err(), context.Canceled) }
