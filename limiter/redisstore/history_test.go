package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// TestHistory proves, on every store, that History lists exactly the
// sends each rule counts: to the millisecond for an exact log, only those
// inside a rolling window (the oldest leaves with it), only today's for a
// calendar day, nothing for a denied send, and nothing for a recipient
// never sent to.
func TestHistory(t *testing.T) {
	storeKinds(t, func(t *testing.T, newStore func(func() time.Time) limiter.Store) {
		ctx := context.Background()
		clock := &limitertest.FixedClock{T: time.Date(2026, 3, 9, 23, 59, 58, 0, time.UTC)}
		s := newStore(clock.Now)
		h, ok := s.(limiter.Historian)
		if !ok {
			t.Fatalf("%T is no Historian", s)
		}
		minute := &limiter.Rule{Name: "minute", By: []string{"r"}, Limit: 3, Window: limiter.Window{Duration: time.Minute}}
		day := &limiter.Rule{Name: "day", By: []string{"r"}, Limit: 10, Window: limiter.Window{Unit: limiter.Day}}
		t0 := clock.T
		var sent []time.Time
		for i, at := range []time.Duration{0, 1500 * time.Millisecond, 3 * time.Second, 4 * time.Second} {
			d, err := s.Decide(ctx, limitertest.Req(t0.Add(at), limitertest.Vals{"r": "amy"}, minute, day))
			if err != nil {
				t.Fatal(err)
			}
			if d.Allowed != (i < 3) {
				t.Fatalf("send %d: allowed %v", i, d.Allowed)
			}
			if d.Allowed {
				sent = append(sent, t0.Add(at))
			}
		}
		got, err := h.History(ctx, limitertest.Req(t0.Add(5*time.Second), limitertest.Vals{"r": "amy"}, minute, day))
		if err != nil {
			t.Fatal(err)
		}
		// 23:59:58, 23:59:59.5 and 00:00:01: the minute counts all three,
		// the day (a new one began at midnight) the last alone.
		if !sameTimes(got[0].Times, sent) || got[0].Grain != 0 || !got[0].From.Equal(t0.Add(5*time.Second-time.Minute)) {
			t.Errorf("minute: %v from %v, want %v", got[0].Times, got[0].From, sent)
		}
		midnight := time.Date(2026, 3, 10, 0, 0, 0, 0, time.UTC)
		if !sameTimes(got[1].Times, sent[2:]) || !got[1].From.Equal(midnight) {
			t.Errorf("day: %v from %v, want %v from %v", got[1].Times, got[1].From, sent[2:], midnight)
		}
		// 61 s on, the first has left the minute.
		got, _ = h.History(ctx, limitertest.Req(t0.Add(61*time.Second), limitertest.Vals{"r": "amy"}, minute))
		if !sameTimes(got[0].Times, sent[1:]) {
			t.Errorf("a minute on: %v, want %v", got[0].Times, sent[1:])
		}
		// A limit over BucketThreshold merges sends into buckets (of a
		// thousandth of the hour): two sends 200 ms apart are one record
		// of two units, at the later time.
		big := &limiter.Rule{Name: "big", By: []string{"b"}, Limit: 5000, Window: limiter.Window{Duration: time.Hour}}
		limitertest.MustDecide(t, s, limitertest.Req(t0, limitertest.Vals{"b": "bo"}, big))
		limitertest.MustDecide(t, s, limitertest.Req(t0.Add(200*time.Millisecond), limitertest.Vals{"b": "bo"}, big))
		got, _ = h.History(ctx, limitertest.Req(t0.Add(time.Second), limitertest.Vals{"b": "bo"}, big))
		if len(got[0].Times) != 1 || got[0].Units[0] != 2 || got[0].Grain == 0 {
			t.Errorf("a bucketed log: %+v", got[0])
		}
		got, _ = h.History(ctx, limitertest.Req(t0, limitertest.Vals{"r": "nobody"}, minute))
		if len(got) != 1 || len(got[0].Times) != 0 {
			t.Errorf("a recipient never sent to: %+v", got)
		}
	})
}

func sameTimes(a, b []time.Time) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if !a[i].Equal(b[i]) {
			return false
		}
	}
	return true
}
