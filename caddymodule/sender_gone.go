package caddymodule

import (
	"context"
	"errors"
	"net/http"
)

// This file is what a sender that goes away, or an answer that breaks off,
// does to a decision and a refund.

// refundIfAborted, deferred around the next handler, refunds when it
// panics after writing a status that refund_on names, then lets the panic
// go on: reverse_proxy panics with http.ErrAbortHandler when an answer's
// body breaks off after its status went out, and the upstream said that
// status all the same.
func (h *Handler) refundIfAborted(r *http.Request, status func() int, refund func()) {
	if p := recover(); p != nil {
		if s := status(); s != 0 && matchesAny(h.refundOn, s) && !hungUp(r) {
			refund()
		}
		panic(p)
	}
}

// hungUp reports whether the sender went away before its answer: its send
// stays counted, whatever the proxy then made of it (reverse_proxy writes
// 499, which refund_on 4xx would match), since the upstream may have the
// message and send it; a refund would let a sender pass a cap by hanging
// up.
func hungUp(r *http.Request) bool { return gaveUp(r.Context()) }

// gaveUp reports whether a request's context ended because its sender went
// away (the connection closed, an HTTP/2 stream reset).
func gaveUp(ctx context.Context) bool { return errors.Is(ctx.Err(), context.Canceled) }

// errSenderGone is a decision not made because its sender went away while
// the store decided: no store failure (no error counted or logged, no
// local decision), and nothing passes on.
var errSenderGone = errors.New("frequency cap: the sender went away while the store decided")

// senderGone answers a request whose sender went away before its decision
// with 499, the status reverse_proxy gives one gone before its answer, for
// the access log: no one reads it.
func senderGone(w http.ResponseWriter) error {
	w.WriteHeader(499)
	return nil
}
