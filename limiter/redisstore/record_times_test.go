package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// A bucketed log taking many admissions in one millisecond keeps their
// times in that millisecond's bucket, on every store and path alike: they
// leave the window with it. Before, each took 1 ms after the newest, so
// 3,000 admissions at one instant were stamped up to 3 s ahead of the
// clock and counted that much longer than the window (a probe saw a rule
// without by run 104 s ahead under load). Admissions that share a time
// share an id, of whose refunds one is taken; an admission never takes a
// refunded record's time.
func TestManyAdmissionsAtOneInstantLeaveTheWindowTogether(t *testing.T) {
	rule := &limiter.Rule{Name: "all", By: []string{"recipient"}, Limit: 100_000, Window: limiter.Window{Duration: time.Minute}}
	t0 := limitertest.MustParse(t, "2026-03-01T10:00:00.001Z")
	at := func(d time.Duration) *limiter.Request {
		return limitertest.Req(t0.Add(d), limitertest.Vals{"recipient": "everyone"}, rule)
	}
	storeKinds(t, func(t *testing.T, newStore func(func() time.Time) limiter.Store) {
		// Refunds are decided at the store's clock: a second in.
		s := newStore(func() time.Time { return t0.Add(time.Second) })
		const n = 3000
		var ids []string
		for i := range n {
			d := limitertest.MustDecide(t, s, at(0))
			if !d.Allowed {
				t.Fatalf("admission %d denied", i)
			}
			ids = append(ids, d.ID())
		}
		if used := limitertest.MustUsage(t, s, at(time.Minute-time.Second)).Results[0].Used; used != n {
			t.Errorf("just before the window ends: used %d, want %d", used, n)
		}
		// The window, and a bucket (10 ms) more: every record has left.
		if used := limitertest.MustUsage(t, s, at(time.Minute+10*time.Millisecond)).Results[0].Used; used != 0 {
			t.Errorf("past the window and a bucket: used %d, want 0", used)
		}
		// Admissions that share a time share an id: each refund gives
		// back what it took, and never more than was admitted.
		refunded := int64(0)
		for _, id := range ids {
			ok, err := s.Refund(context.Background(), id)
			if err != nil {
				t.Fatal(err)
			}
			if ok {
				refunded++
			}
		}
		used := limitertest.MustUsage(t, s, at(time.Second)).Results[0].Used
		if refunded == 0 || used != n-refunded {
			t.Errorf("%d refunds taken, used %d after them; want some, and used %d", refunded, used, n-refunded)
		}
		t.Logf("%d of %d refunds taken", refunded, n)
		// The newest time is now a refunded record's: a later admission
		// takes a time of its own, never the tomb's, and its refund is
		// taken.
		d := limitertest.MustDecide(t, s, at(0))
		if ok, err := s.Refund(context.Background(), d.ID()); !ok || err != nil {
			t.Errorf("the refund of an admission after the refunds: %v %v, want taken", ok, err)
		}
	})
}
