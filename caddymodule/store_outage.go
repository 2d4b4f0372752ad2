package caddymodule

import (
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// storeOutage notes when a cap set's store starts failing and how
// on_error decided meanwhile, and logs one line when the store answers
// again: how long it failed and how many decisions on_error took, so an
// operator reading the log after an incident sees what it cost without
// adding up the failure lines. Its methods take the time as an argument.
//
// The store answering is the hot path: answered costs one atomic load
// while nothing failed. It is safe for concurrent use; a failure that
// races with the recovery may be counted in the next outage instead.
type storeOutage struct {
	logger  *zap.Logger
	handler string

	// since is the first failure's time (Unix nanoseconds) while the
	// store fails, 0 while it answers.
	since atomic.Int64
	// allowed, denied and local count the decisions on_error took since.
	allowed, denied, local atomic.Int64
	// warnings are the failure lines of the same store, drained before
	// the outage's line so that it comes last.
	warnings []*storeWarnings
}

// failed notes a store failure at now, and the decision on_error took for
// it: OnErrorAllow, OnErrorDeny, OnErrorLocal, or "" for a failure that
// decided nothing (a quiet rule's answer stood without the store's).
func (o *storeOutage) failed(now time.Time, onError string) {
	if o == nil {
		return
	}
	if o.since.Load() == 0 {
		o.since.CompareAndSwap(0, now.UnixNano())
	}
	switch onError {
	case OnErrorAllow:
		o.allowed.Add(1)
	case OnErrorDeny:
		o.denied.Add(1)
	case OnErrorLocal:
		o.local.Add(1)
	}
}

// answered notes that the store answered at now; the first answer after
// a failure logs the outage at info.
func (o *storeOutage) answered(now time.Time) {
	if o == nil || o.since.Load() == 0 {
		return
	}
	since := o.since.Swap(0)
	if since == 0 {
		return // another answer logged it
	}
	allowed, denied, local := o.allowed.Swap(0), o.denied.Swap(0), o.local.Swap(0)
	if o.logger == nil {
		return
	}
	for _, w := range o.warnings {
		w.drain()
	}
	o.logger.Info("frequency cap store answers again",
		zap.String("handler", o.handler),
		zap.Duration("failed_for", now.Sub(time.Unix(0, since))),
		zap.Int64("on_error_allowed", allowed),
		zap.Int64("on_error_denied", denied),
		zap.Int64("on_error_local", local))
}
