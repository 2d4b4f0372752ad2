package limiter

import (
	"context"
	"fmt"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"
)

// Sends is what one check's rule counts now, as its log keeps it: the
// records of the window (or calendar period), oldest first. A log whose
// limits are all at most BucketThreshold keeps every send to the
// millisecond (Grain 0); a bucketed log keeps one record a bucket of
// Grain, at the time of the latest send in it, holding their units.
type Sends struct {
	// From is where the rule's window begins: now less the window, or
	// the start of the calendar period.
	From  time.Time
	Times []time.Time
	Units []int64
	// Exempt is, for each record, how many of its units exempt sends
	// made (all of them, none, or in a bucket some): admitted past the
	// rules, and counted as any.
	Exempt []int64
	Grain  time.Duration
}

// Historian is a Store that can say which sends a request's checks count,
// for support staff asking "what did we send this person, and when?". It
// records nothing. The Memory, Redis and Fallback stores implement it.
type Historian interface {
	// History returns, for each check of req in order, what its rule
	// counts at req.Now (the store's clock when zero).
	History(ctx context.Context, req *Request) ([]Sends, error)
}

// HistoryOn lists what every check of p counts at now, reading each key
// of src once, as decideOn does.
func HistoryOn(src KeySource, p *Plan, now int64, checks int) ([]Sends, error) {
	out := make([]Sends, checks)
	keys := make([]*recordlog.KeyLogs, 0, len(p.Sections))
	for si := range p.Sections {
		s := &p.Sections[si]
		k, l := sectionLog(src, p, si, keys, now)
		keys = append(keys, k)
		exempt := k.ExemptUnits(nil, p.Sub(s), l, s.Grain)
		for ri := s.R0; ri < s.R1; ri++ {
			r := &p.Rules[ri]
			from := now - r.Window
			first := func(t int64) bool { return t > from }
			if r.Window == 0 {
				start, _, ok := recordlog.PickPeriod(r.Bounds, now)
				if !ok {
					return nil, ErrClockSkew
				}
				from = start
				first = func(t int64) bool { return t >= start }
			}
			h := Sends{From: time.UnixMilli(from), Grain: time.Duration(s.Grain) * time.Millisecond}
			for i, e := range l.Entries {
				if first(e.T) {
					h.Times = append(h.Times, time.UnixMilli(e.T))
					h.Units = append(h.Units, e.C)
					h.Exempt = append(h.Exempt, exempt[i])
				}
			}
			out[r.check] = h
		}
	}
	return out, nil
}

// History implements Historian: the primary's, or the local store's while
// the primary fails, as Usage answers.
func (f *Fallback) History(ctx context.Context, req *Request) ([]Sends, error) {
	if h, ok := f.primary.(Historian); ok {
		sends, err := h.History(ctx, req)
		if err == nil || !fails(ctx, err) {
			return sends, err
		}
	}
	if h, ok := f.local.(Historian); ok {
		return h.History(ctx, req)
	}
	return nil, fmt.Errorf("%w: the store keeps no history", ErrStore)
}
