package limiter

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
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
	Grain time.Duration
}

// Historian is a Store that can say which sends a request's checks count,
// for support staff asking "what did we send this person, and when?". It
// records nothing. The Memory, Redis and Fallback stores implement it.
type Historian interface {
	// History returns, for each check of req in order, what its rule
	// counts at req.Now (the store's clock when zero).
	History(ctx context.Context, req *Request) ([]Sends, error)
}

// historyOn lists what every check of p counts at now, reading each key
// of src once, as decideOn does.
func historyOn(src keySource, p *plan, now int64, checks int) ([]Sends, error) {
	out := make([]Sends, checks)
	keys := make([]*keyLogs, 0, len(p.sections))
	for si := range p.sections {
		s := &p.sections[si]
		k, l := sectionLog(src, p, si, keys, now)
		keys = append(keys, k)
		for ri := s.r0; ri < s.r1; ri++ {
			r := &p.rules[ri]
			from := now - r.window
			first := func(t int64) bool { return t > from }
			if r.window == 0 {
				start, _, ok := pickPeriod(r.bounds, now)
				if !ok {
					return nil, ErrClockSkew
				}
				from = start
				first = func(t int64) bool { return t >= start }
			}
			h := Sends{From: time.UnixMilli(from), Grain: time.Duration(s.grain) * time.Millisecond}
			for _, e := range l.entries {
				if first(e.t) {
					h.Times = append(h.Times, time.UnixMilli(e.t))
					h.Units = append(h.Units, e.c)
				}
			}
			out[r.check] = h
		}
	}
	return out, nil
}

// History implements Historian.
func (m *Memory) History(_ context.Context, req *Request) ([]Sends, error) {
	var sends []Sends
	err := m.locked(req, func(p *plan, tx *memTxn, now int64) (err error) {
		sends, err = historyOn(tx, p, now, len(req.Checks))
		return err
	})
	return sends, err
}

// History implements Historian: one pipeline of a GET a key (and TIME,
// unless req.Now is set), decoded and read in Go as the memory store
// reads its own.
func (s *Redis) History(ctx context.Context, req *Request) ([]Sends, error) {
	nowArg, approx := s.nowArg(req)
	p := getPlan()
	defer p.release()
	if err := p.build(s.opts.Prefix, req, approx); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	src := historySource{}
	gets := map[string]*redis.StringCmd{}
	var clock *redis.TimeCmd
	_, err := s.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		if nowArg == 0 {
			clock = pipe.Time(ctx)
		}
		for si := range p.sections {
			key := string(p.key(&p.sections[si]))
			if gets[key] == nil {
				gets[key] = pipe.Get(ctx, key)
			}
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, classify(err)
	}
	now := nowArg
	if clock != nil {
		now = clock.Val().UnixMilli()
	}
	for key, g := range gets {
		b, err := g.Bytes()
		if err == redis.Nil {
			continue
		}
		if err != nil {
			return nil, classify(err)
		}
		k := new(keyLogs)
		if err := decodeBlob(b, k); err != nil {
			return nil, fmt.Errorf("%w: key %q: %v", ErrStore, key, err)
		}
		src[key] = k
	}
	return historyOn(src, p, now, len(req.Checks))
}

// historySource is the keys a history read, by name.
type historySource map[string]*keyLogs

func (h historySource) lookup(p *plan, si int, now int64) *keyLogs {
	k := h[string(p.key(&p.sections[si]))]
	if k != nil {
		k.prune(now)
	}
	return k
}

func (h historySource) create(*plan, int) *keyLogs { return nil } // never: nothing is written

// History implements Historian: the primary's, or the local store's while
// the primary fails, as Usage answers.
func (f *Fallback) History(ctx context.Context, req *Request) ([]Sends, error) {
	if h, ok := f.primary.(Historian); ok {
		sends, err := h.History(ctx, req)
		if err == nil || !fails(err) {
			return sends, err
		}
	}
	if h, ok := f.local.(Historian); ok {
		return h.History(ctx, req)
	}
	return nil, fmt.Errorf("%w: the store keeps no history", ErrStore)
}
