package lease

import (
	"context"
	"errors"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"
)

// This file is the admission ids: the inner store's records, then one
// record per leased check.

// leaseKey is the key of a leased check's record in an admission id. Every
// store key holds the hash tag's braces, so no store record has this one.
// The record's grain is the block's handle, its time the taking's number
// plus one (a record's time is never 0), its cost the units.
const leaseKey = "lease"

func (tk *taking) record() recordlog.Recorded {
	return recordlog.Recorded{Key: leaseKey, Grain: int64(tk.b.handle), T: int64(tk.take) + 1, C: tk.units}
}

// withID returns an admitted decision for req whose id lists recs, with
// empty results for the caller to fill. (A Plan is the one way to give a
// Decision an id from outside package limiter: its sections are the
// records.)
func withID(req *limiter.Request, recs []recordlog.Recorded) *limiter.Decision {
	p := limiter.GetPlan()
	defer p.Release()
	for _, r := range recs {
		p.AddLog(r.Key, r.Sub)
		sec := &p.Sections[len(p.Sections)-1]
		sec.Grain, sec.Recorded, sec.Cost = r.Grain, r.T, r.C
	}
	return p.Finish(req, 0, true)
}

// localDecision is the admitted decision of req whose leased checks took
// their units (taken) and whose other checks inner admitted (nil when it
// has none); the results of inner's checks are the caller's to fill.
func (s *Store) localDecision(req *limiter.Request, taken []taking, inner *limiter.Decision) *limiter.Decision {
	var recs []recordlog.Recorded
	if inner != nil && inner.Recorded() {
		// The inner store's ids are records (memstore, redisstore).
		recs, _ = recordlog.DecodeID(inner.ID())
	}
	for i := range taken {
		recs = append(recs, taken[i].record())
	}
	d := withID(req, recs)
	s.fillLeased(d, taken)
	if inner == nil {
		d.Now = taken[0].at
		finish(d, true)
	}
	return d
}

// fillLeased puts the leased checks' answers in d.
func (s *Store) fillLeased(d *limiter.Decision, taken []taking) {
	for i := range taken {
		d.Results[taken[i].check] = taken[i].res
	}
}

// Refund implements limiter.Store: a leased check's units go back to
// their block while it is spent, else to the store from the block's
// record (once, and while the block is kept: Options.Keep); the inner
// store's records go back to it.
func (s *Store) Refund(ctx context.Context, id string) (bool, error) {
	recs, err := recordlog.DecodeID(id)
	if err != nil {
		return s.inner.Refund(ctx, id)
	}
	var inner []recordlog.Recorded
	given := false
	var errs []error
	for _, r := range recs {
		if r.Key != leaseKey {
			inner = append(inner, r)
			continue
		}
		s.mu.RLock()
		b := s.blocks[uint64(r.Grain)]
		s.mu.RUnlock()
		if b == nil || r.T < 1 {
			continue
		}
		ok, err := s.giveUnits(ctx, b, r.C, r.T-1)
		given = given || ok
		errs = append(errs, err)
	}
	if len(inner) > 0 {
		ok, err := s.inner.Refund(ctx, recordlog.EncodeID(inner))
		given = given || ok
		errs = append(errs, err)
	}
	return given, errors.Join(errs...)
}
