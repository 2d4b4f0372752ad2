package limiter

import (
	"context"
	"errors"
)

// Fallback decides in a primary store (Redis, shared by every gateway)
// and, for each decision the primary fails or does not answer in time, in
// a local store of this process (a Memory) with every limit divided by a
// divisor, rounded up, at least 1: N gateways that each admit their share
// during an outage together stay near the shared limit. The switch is per
// decision, so it costs no wait beyond the primary's own timeout, and the
// first decision the primary answers again is back on it: there is no
// state to recover. What was admitted locally is never copied to the
// primary.
//
// A decision made locally carries the primary's error in
// Decision.Fallback. Its admission id is marked as local, so its refund
// goes to the local store. Fallback is safe for concurrent use; it starts
// no goroutine of its own.
type Fallback struct {
	primary, local Store
	divisor        int64
}

// localID starts the admission id of a local decision. A store's own ids
// start with the length of a key, never 0.
const localID = 0

// NewFallback returns a store deciding in primary, and in local while
// primary fails, with limits divided by divisor (at least 1). Close closes
// both.
func NewFallback(primary, local Store, divisor int64) *Fallback {
	return &Fallback{primary: primary, local: local, divisor: max(divisor, 1)}
}

// fails reports whether err is the primary failing (rather than the
// request being wrong, or its caller giving up: ctx ended, the caller
// gone, where a store reports ErrStore): the case for a local decision.
func fails(ctx context.Context, err error) bool {
	return ctx.Err() == nil && (errors.Is(err, ErrStore) || errors.Is(err, ErrTimeout))
}

// Decide implements Store.
func (f *Fallback) Decide(ctx context.Context, req *Request) (*Decision, error) {
	d, err := f.primary.Decide(ctx, req)
	if err == nil || !fails(ctx, err) {
		return d, err
	}
	return f.decideLocally(ctx, req, err, true)
}

// Usage implements Store.
func (f *Fallback) Usage(ctx context.Context, req *Request) (*Decision, error) {
	d, err := f.primary.Usage(ctx, req)
	if err == nil || !fails(ctx, err) {
		return d, err
	}
	return f.decideLocally(ctx, req, err, false)
}

// DecideBatch implements Store: the whole batch is decided in the primary,
// or, when it fails, in the local store.
func (f *Fallback) DecideBatch(ctx context.Context, reqs []Request, mode BatchMode) ([]*Decision, error) {
	ds, err := f.primary.DecideBatch(ctx, reqs, mode)
	if err == nil || !fails(ctx, err) {
		return ds, err
	}
	local := make([]Request, len(reqs))
	for i := range reqs {
		local[i] = f.divided(&reqs[i])
	}
	ds, lerr := f.local.DecideBatch(ctx, local, mode)
	if lerr != nil {
		return nil, errors.Join(err, lerr)
	}
	for _, d := range ds {
		f.markLocal(d, err)
	}
	return ds, nil
}

// divided is req with every limit divided for the local store.
func (f *Fallback) divided(req *Request) Request {
	local := *req
	local.Checks = make([]Check, len(req.Checks))
	for i, c := range req.Checks {
		limit := c.Rule.Limit
		if c.Limit > 0 {
			limit = min(c.Limit, limit)
		}
		c.Limit = max(1, (limit+f.divisor-1)/f.divisor)
		local.Checks[i] = c
	}
	return local
}

// markLocal marks d as decided locally because of cause.
func (f *Fallback) markLocal(d *Decision, cause error) {
	d.Fallback = cause
	if len(d.id) > 0 {
		d.id = append([]byte{localID}, d.id...)
	}
}

func (f *Fallback) decideLocally(ctx context.Context, req *Request, cause error, record bool) (*Decision, error) {
	local := f.divided(req)
	var d *Decision
	var err error
	if record {
		d, err = f.local.Decide(ctx, &local)
	} else {
		d, err = f.local.Usage(ctx, &local)
	}
	if err != nil {
		return nil, errors.Join(cause, err)
	}
	f.markLocal(d, cause)
	return d, nil
}

// Refund implements Store: a local admission is refunded locally.
func (f *Fallback) Refund(ctx context.Context, id string) (bool, error) {
	if len(id) > 0 && id[0] == localID {
		return f.local.Refund(ctx, id[1:])
	}
	return f.primary.Refund(ctx, id)
}

// Reset implements Store: it forgets in the primary, then in the local
// store. When the primary fails it forgets nothing here either: its
// caller is told the reset failed, and the local store, deciding during
// the outage, must not lift the cap meanwhile (it did: a probe's reset
// answered 503 and the next send passed).
func (f *Fallback) Reset(ctx context.Context, req *Request) error {
	if err := f.primary.Reset(ctx, req); err != nil {
		return err
	}
	return f.local.Reset(ctx, req)
}

// Close implements Store: it closes both stores.
func (f *Fallback) Close() error {
	return errors.Join(f.primary.Close(), f.local.Close())
}
