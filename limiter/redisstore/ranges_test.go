package redisstore

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
	"github.com/freqcap/caddy-freqcap/limiter/memstore"
)

// budget is a daily budget by amount of the given limit: above
// BucketThreshold, so its log keeps records in buckets.
func budget(limit int64) *limiter.Rule {
	return &limiter.Rule{Name: "budget", By: []string{"campaign"}, Limit: limit, Window: limiter.Window{Unit: limiter.Day}, Weight: "{json.amount}"}
}

func spend(t0 time.Time, r *limiter.Rule, cost int64) *limiter.Request {
	return &limiter.Request{Now: t0, Checks: []limiter.Check{{Rule: r, Values: []string{"c1"}, Cost: cost}}}
}

// A cost outside 0..MaxCost, or a limit outside 0..MaxLimit, is refused
// with an error by every store and records nothing: an overflowing cost
// (2^63-1, which made used+cost wrap below the limit) never passes a
// spent budget, and a cost of 2^32 or 2^48 is never cut to what four or
// six bytes keep.
func TestNumbersOutsideTheirRangeAreRefused(t *testing.T) {
	t0 := limitertest.MustParse(t, "2026-03-01T10:00:00Z")
	storeKinds(t, func(t *testing.T, newStore func(func() time.Time) limiter.Store) {
		s := newStore(func() time.Time { return t0 })
		r := budget(1000)
		if d := limitertest.MustDecide(t, s, spend(t0, r, 1000)); !d.Allowed {
			t.Fatal("the first 1000 were denied")
		}
		for _, cost := range []int64{math.MaxInt64, limiter.MaxCost + 1, 1 << 48, 1<<48 + 5, -1, math.MinInt64} {
			if d, err := s.Decide(context.Background(), spend(t0.Add(time.Second), r, cost)); err == nil {
				t.Errorf("cost %d: no error; allowed %v, used %d", cost, d.Allowed, d.Results[0].Used)
			}
		}
		for _, limit := range []int64{limiter.MaxLimit + 1, math.MaxInt64, -1} {
			req := spend(t0.Add(time.Second), r, 1)
			req.Checks[0].Limit = limit
			if _, err := s.Decide(context.Background(), req); err == nil {
				t.Errorf("check limit %d: no error", limit)
			}
		}
		if u := limitertest.MustUsage(t, s, spend(t0.Add(2*time.Second), r, 0)); u.Results[0].Used != 1000 {
			t.Fatalf("after refused requests: used %d; want 1000", u.Results[0].Used)
		}
	})
	if err := budget(limiter.MaxLimit + 1).Validate(); err == nil {
		t.Error("a rule with a limit above MaxLimit is valid")
	}
}

// Records that share a time bucket hold at most MaxCost together: past
// it, a record starts an entry of its own, so sums of large costs are
// counted exactly (three sends of 4 GiB less a byte under a 10 GiB
// budget: two admitted, the third denied, and a refund gives exactly one
// back), the same on every store.
func TestBucketSumsStayExact(t *testing.T) {
	t0 := limitertest.MustParse(t, "2026-03-01T10:00:00Z")
	storeKinds(t, func(t *testing.T, newStore func(func() time.Time) limiter.Store) {
		clock := &limitertest.FixedClock{T: t0}
		s := newStore(clock.Now)
		r := budget(10 << 30)
		var ids []string
		for i, want := range []bool{true, true, false} {
			d := limitertest.MustDecide(t, s, spend(t0.Add(time.Duration(i)*time.Millisecond), r, limiter.MaxCost))
			if d.Allowed != want {
				t.Fatalf("send %d: allowed %v; want %v (used %d)", i, d.Allowed, want, d.Results[0].Used)
			}
			if d.Allowed {
				ids = append(ids, d.ID())
			}
		}
		if u := limitertest.MustUsage(t, s, spend(t0.Add(time.Second), r, 0)); u.Results[0].Used != 2*limiter.MaxCost {
			t.Fatalf("used %d; want %d", u.Results[0].Used, 2*limiter.MaxCost)
		}
		clock.T = t0.Add(time.Second)
		if ok, err := s.Refund(context.Background(), ids[1]); !ok || err != nil {
			t.Fatalf("refund: %v %v", ok, err)
		}
		if u := limitertest.MustUsage(t, s, spend(t0.Add(time.Second), r, 0)); u.Results[0].Used != limiter.MaxCost {
			t.Fatalf("after a refund: used %d; want %d", u.Results[0].Used, int64(limiter.MaxCost))
		}
		// Exempt sends record past the limit, as exactly.
		for i := range 3 {
			req := spend(t0.Add(time.Second+time.Duration(i)*time.Millisecond), r, limiter.MaxCost)
			req.Exempt = true
			if d := limitertest.MustDecide(t, s, req); !d.Allowed {
				t.Fatalf("exempt send %d denied", i)
			}
		}
		if u := limitertest.MustUsage(t, s, spend(t0.Add(2*time.Second), r, 0)); u.Results[0].Used != 4*limiter.MaxCost {
			t.Fatalf("after exempt sends: used %d; want %d", u.Results[0].Used, 4*limiter.MaxCost)
		}
	})
}

// For costs and limits anywhere in int64, the memory store, Redis
// deciding in Go and Redis deciding in freqcap.lua accept and refuse
// exactly the same requests, and count the same.
func FuzzCostsAndLimits(f *testing.F) {
	for _, seed := range [][4]int64{
		{1000, 1000, math.MaxInt64, 1},
		{10 << 30, limiter.MaxCost, limiter.MaxCost, limiter.MaxCost},
		{limiter.MaxLimit, limiter.MaxCost + 1, 1 << 48, 1<<48 + 5},
		{5, 3, 3, -1},
		{limiter.MaxLimit + 1, 1, 1, 1},
		{1 << 47, 0, limiter.MaxCost, 2},
	} {
		f.Add(seed[0], seed[1], seed[2], seed[3], false)
	}
	client := redistest.Client(f)
	t0 := time.Date(2026, 3, 1, 10, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, limit, c1, c2, c3 int64, exempt bool) {
		ctx := context.Background()
		if err := client.FlushDB(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		clock := func() time.Time { return t0 }
		stores := []limiter.Store{
			memstore.New(memstore.Options{Now: clock, SweepInterval: -1}),
			New(client, Options{Now: clock, Timeout: 5 * time.Second, Prefix: "go:", GoBatchMin: 1}),
			New(client, Options{Now: clock, Timeout: 5 * time.Second, Prefix: "lua:", ScriptOnly: true}),
		}
		for _, s := range stores {
			defer s.Close()
		}
		// The rule's limit is refused when out of range, as a config
		// error; in range, it is the rule's, and each request also
		// names limit as its own (capped at the rule's).
		ruleLimit := limit
		if (&limiter.Rule{Name: "b", By: []string{"c"}, Limit: limit, Window: limiter.Window{Unit: limiter.Day}}).Validate() != nil {
			ruleLimit = limiter.MaxLimit
		}
		r := budget(ruleLimit)
		for i, cost := range []int64{c1, c2, c3} {
			req := spend(t0.Add(time.Duration(i)*time.Millisecond), r, cost)
			req.Exempt = exempt
			req.Checks[0].Limit = limit
			var first string
			for k, s := range stores {
				d, err := s.Decide(ctx, req)
				got := "error"
				if err == nil {
					got = limitertest.Describe(d)
				}
				if k == 0 {
					first = got
				} else if got != first {
					t.Fatalf("send %d (limit %d, cost %d, exempt %v): store %d answered %s; the memory store %s", i, limit, cost, exempt, k, got, first)
				}
			}
		}
	})
}
