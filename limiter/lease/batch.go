package lease

import (
	"context"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// DecideBatch implements limiter.Store. Entry by entry, in order, the
// leased checks take their units from the blocks (an entry the blocks
// cannot serve is decided whole, see servedAs); then the rest of every
// entry is decided in one inner batch, in the same mode. Units go back for
// each entry the inner store denies under BatchEach, and for every entry
// when any is denied under BatchAll (which then records nothing). Since the
// units are taken before the inner batch is decided, an entry's leased
// result counts the units of earlier entries that the inner batch then
// denied (towards denying, near the limit).
func (s *Store) DecideBatch(ctx context.Context, reqs []limiter.Request, mode limiter.BatchMode) ([]*limiter.Decision, error) {
	if err := limiter.CheckBatch(reqs, mode); err != nil {
		return nil, err
	}
	how := make([]service, len(reqs))
	someLeased := false
	for i := range reqs {
		how[i] = servedAs(&reqs[i])
		someLeased = someLeased || how[i] != unleased
	}
	if !someLeased {
		return s.inner.DecideBatch(ctx, reqs, mode)
	}
	taken := make([][]taking, len(reqs))
	putBackAll := func() {
		for _, tk := range taken {
			s.putBack(tk)
		}
	}
	for i := range reqs {
		if how[i] != leased {
			continue
		}
		for ci := range reqs[i].Checks {
			c := &reqs[i].Checks[ci]
			if c.Rule.Lease <= 0 {
				continue
			}
			tk, err := s.take(ctx, c, reqs[i].Now)
			if err != nil {
				putBackAll()
				return nil, err
			}
			if tk.b == nil {
				s.putBack(taken[i])
				taken[i], how[i] = nil, whole
				break
			}
			tk.check = ci
			taken[i] = append(taken[i], tk)
		}
	}

	// The inner batch: the rest of each leased entry that has one, and
	// every other entry whole (extended).
	var inner []limiter.Request
	at := make([]int, len(reqs)) // entry -> index in inner, or -1
	for i := range reqs {
		at[i] = -1
		var r limiter.Request
		switch how[i] {
		case unleased:
			r = reqs[i]
		case whole:
			r = s.extendRequest(&reqs[i])
		default:
			if r = restOf(&reqs[i], len(taken[i])); len(r.Checks) == 0 {
				continue
			}
		}
		at[i] = len(inner)
		inner = append(inner, r)
	}
	var ds []*limiter.Decision
	if len(inner) > 0 {
		var err error
		if ds, err = s.inner.DecideBatch(ctx, inner, mode); err != nil {
			putBackAll()
			return nil, err
		}
	}
	failed := mode == limiter.BatchAll && limiter.AnyDenied(ds)
	out := make([]*limiter.Decision, len(reqs))
	for i := range reqs {
		var d *limiter.Decision
		if at[i] >= 0 {
			d = ds[at[i]]
		}
		switch {
		case how[i] == unleased:
			out[i] = d
		case how[i] == whole:
			s.answered(&reqs[i], d)
			out[i] = d
		case failed:
			// Answered as decided in its place; nothing recorded.
			s.putBack(taken[i])
			out[i] = unrecorded(&reqs[i], taken[i], d)
		case d == nil:
			out[i] = s.localDecision(&reqs[i], taken[i], nil)
		default:
			if !d.Allowed {
				s.putBackDenied(taken[i])
			}
			out[i] = s.merge(&reqs[i], taken[i], d)
		}
	}
	return out, nil
}

// unrecorded is the answer of an entry of a batch under BatchAll that
// another entry's denial left unrecorded: its leased checks' answers and
// the inner store's (when it has other checks), with no id.
func unrecorded(req *limiter.Request, taken []taking, d *limiter.Decision) *limiter.Decision {
	out := &limiter.Decision{Results: make([]limiter.Result, len(req.Checks))}
	for i := range taken {
		out.Results[taken[i].check] = taken[i].res
		out.Now = taken[i].at
	}
	allowed := true
	if d != nil {
		out.Now, out.Fallback, allowed = d.Now, d.Fallback, d.Allowed
		j := 0
		for i := range req.Checks {
			if req.Checks[i].Rule.Lease > 0 {
				continue
			}
			out.Results[i] = d.Results[j]
			j++
		}
	}
	finish(out, allowed)
	return out
}
