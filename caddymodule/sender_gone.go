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
// sender has hung up, where the sender had gone before the send was
// passed on: the gateway has the whole request (or passes on what the
// sender streams), so the send goes on as if the sender waited for its
// answer, and is counted, refunded or not as its answer says. A
// fire-and-forget sender that closes right after its request had it
// counted and, half the time, never delivered: reverse_proxy gave up on
// it, having found the sender gone. The bound keeps a hung upstream from
// holding the call for ever, which the sender's going away used to end.
const hangUpGrace = 30 * time.Second

// passOn is the next handler (the upstream's proxy) as a cap set passes a
// request on to it. A request whose sender is still there goes on as it
// is; one whose sender has gone (it hung up once its request was sent,
// or while the store decided) goes on with a context that ends only
// hangUpGrace from then (passedOn), as if the sender waited. Deciding first
// and looking then costs nothing where senders wait, as nearly all do.
// One is made for each request.
type passOn struct {
	next caddyhttp.Handler
	// cut reports that the upstream call was cut off, once it returned:
	// its sender went away while it ran, or it ran past hangUpGrace after
	// its sender had gone. Its send stays counted, whatever the proxy
	// made of it (reverse_proxy writes 499, which refund_on 4xx would
	// match), since the upstream may have the message and send it.
	cut bool
}

// ServeHTTP passes the request on, as the type says.
func (p *passOn) ServeHTTP(w http.ResponseWriter, r *http.Request) error {
	if r.Context().Err() != nil {
		var release context.CancelFunc
		r, release = passedOn(r, hangUpGrace)
		defer release()
		caddyhttp.SetVar(r.Context(), passedAnewVar, p)
	}
	mine := caddyhttp.GetVar(r.Context(), passedAnewVar)
	// Deferred, so that it is set before a panic (http.ErrAbortHandler)
	// reaches refundIfAborted, and before release.
	defer func() {
		if q, ok := caddyhttp.GetVar(r.Context(), passedAnewVar).(*passOn); ok && q != mine {
			// A cap set after this one passed it on anew, its sender
			// gone by then: the upstream call was that one's, so both
			// sets give back (or not) alike.
			p.cut = q.cut
			return
		}
		p.cut = r.Context().Err() != nil
	}()
	return p.next.ServeHTTP(w, r)
}

// passedAnewVar is the request variable that holds the passOn (of the
// cap sets in one route) that last passed the request on anew.
const passedAnewVar = "freqcap.passed_anew"

// passedOn returns r with a context that ends grace from now, whatever
// its sender, which is gone, and the func that releases it once the
// request is served.
func passedOn(r *http.Request, grace time.Duration) (*http.Request, context.CancelFunc) {
	ctx, release := context.WithTimeout(context.WithoutCancel(r.Context()), grace)
	return r.WithContext(ctx), release
}
