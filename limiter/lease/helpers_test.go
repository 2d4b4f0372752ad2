package lease

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/memstore"
	"github.com/freqcap/caddy-freqcap/limiter/redisstore"
)

// clock is a settable clock that goroutines may read while a test moves
// it: the gateways' and the store's one time.
type clock struct{ ms atomic.Int64 }

func newClock(t0 time.Time) *clock {
	c := &clock{}
	c.ms.Store(t0.UnixMilli())
	return c
}

func (c *clock) Now() time.Time      { return time.UnixMilli(c.ms.Load()).UTC() }
func (c *clock) Add(d time.Duration) { c.ms.Add(d.Milliseconds()) }
func (c *clock) Set(t time.Time)     { c.ms.Store(t.UnixMilli()) }

// t0 is a Saturday noon, UTC.
var t0 = time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC)

// storeKinds runs f on a memory store and on a real Redis (skipped, saying
// so, without redis-server unless FREQCAP_REQUIRE_REDIS=1), each on the
// clock it is given.
func storeKinds(t *testing.T, f func(t *testing.T, newInner func(now func() time.Time) limiter.Store)) {
	t.Run("memory", func(t *testing.T) {
		f(t, func(now func() time.Time) limiter.Store {
			m := memstore.New(memstore.Options{Now: now, SweepInterval: -1})
			t.Cleanup(func() { m.Close() })
			return m
		})
	})
	t.Run("redis", func(t *testing.T) {
		client := redistest.Client(t)
		f(t, func(now func() time.Time) limiter.Store {
			s := redisstore.New(client, redisstore.Options{Now: now, Timeout: 5 * time.Second})
			t.Cleanup(func() { s.Close() })
			return s
		})
	})
}

// gateway is a lease store on inner with the test's clock and no sweep of
// its own; its inner store stays open when it closes, for gateways that
// share one.
func gateway(t *testing.T, inner limiter.Store, c *clock, term time.Duration) *Store {
	s := New(inner, Options{Now: c.Now, Term: term, Sweep: -1, KeepInnerOpen: true})
	t.Cleanup(func() { s.Close() })
	return s
}

// counting counts the calls that reach a store.
type counting struct {
	limiter.Store
	decides, batches, refunds, usages atomic.Int64
}

func (c *counting) Decide(ctx context.Context, req *limiter.Request) (*limiter.Decision, error) {
	c.decides.Add(1)
	return c.Store.Decide(ctx, req)
}

func (c *counting) DecideBatch(ctx context.Context, reqs []limiter.Request, mode limiter.BatchMode) ([]*limiter.Decision, error) {
	c.batches.Add(1)
	return c.Store.DecideBatch(ctx, reqs, mode)
}

func (c *counting) Refund(ctx context.Context, id string) (bool, error) {
	c.refunds.Add(1)
	return c.Store.Refund(ctx, id)
}

func (c *counting) Usage(ctx context.Context, req *limiter.Request) (*limiter.Decision, error) {
	c.usages.Add(1)
	return c.Store.Usage(ctx, req)
}

// failing fails every call with limiter.ErrStore while down is set.
type failing struct {
	limiter.Store
	down atomic.Bool
}

func (f *failing) Decide(ctx context.Context, req *limiter.Request) (*limiter.Decision, error) {
	if f.down.Load() {
		return nil, limiter.ErrStore
	}
	return f.Store.Decide(ctx, req)
}

func (f *failing) Refund(ctx context.Context, id string) (bool, error) {
	if f.down.Load() {
		return false, limiter.ErrStore
	}
	return f.Store.Refund(ctx, id)
}

// coupons is the hot budget: one key, 233,300 a day (UTC).
func coupons(lease int64) *limiter.Rule {
	return &limiter.Rule{Name: "coupons", By: []string{"campaign"}, Limit: 233_300, Window: limiter.Window{Unit: limiter.Day}, Lease: lease}
}

func check(r *limiter.Rule, vals ...string) limiter.Check {
	return limiter.Check{Rule: r, Values: vals, Cost: 1}
}

func req(checks ...limiter.Check) *limiter.Request { return &limiter.Request{Checks: checks} }

// used is what the store counts for the check now.
func used(t *testing.T, s limiter.Store, c limiter.Check) int64 {
	t.Helper()
	d, err := s.Usage(context.Background(), req(c))
	if err != nil {
		t.Fatal(err)
	}
	return d.Results[0].Used
}

func mustDecide(t *testing.T, s limiter.Store, r *limiter.Request) *limiter.Decision {
	t.Helper()
	d, err := s.Decide(context.Background(), r)
	if err != nil {
		t.Fatalf("decide: %v", err)
	}
	return d
}
