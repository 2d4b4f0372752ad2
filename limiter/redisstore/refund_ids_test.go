package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// Refunds must give back exactly what one admission recorded, once. These
// show where an admission id can name another admission's record.

// Once a refund has removed a log's newest record, the next admission in
// the same millisecond gets the same time and so the same id: a repeated
// refund of the first admission then gives back the second one's quota,
// and a limit of 1 admits twice.
func TestRefundTwiceDoesNotTakeANewerAdmission(t *testing.T) {
	storeKinds(t, func(t *testing.T, newStore func(func() time.Time) limiter.Store) {
		clock := &limitertest.FixedClock{T: limitertest.MustParse(t, "2026-03-07T12:00:00Z")}
		s := newStore(clock.Now)
		ctx := context.Background()
		rule := &limiter.Rule{Name: "one", By: []string{"recipient"}, Limit: 1, Window: limiter.Window{Duration: time.Minute}}
		r := limitertest.Req(clock.T, limitertest.Vals{"recipient": "alice"}, rule)
		a := limitertest.MustDecide(t, s, r)
		if ok, _ := s.Refund(ctx, a.ID()); !ok {
			t.Fatal("first refund refused")
		}
		if b := limitertest.MustDecide(t, s, r); !b.Allowed {
			t.Fatal("quota not given back")
		}
		if ok, _ := s.Refund(ctx, a.ID()); ok {
			t.Errorf("a second refund of the first admission gave back the second one")
		}
		if d := limitertest.MustDecide(t, s, r); d.Allowed {
			t.Errorf("limit 1 admitted a second request in the window")
		}
	})
}

// After Reset, an admission in the same millisecond as a forgotten one
// reuses its time: refunding the forgotten admission takes the new one.
func TestRefundAfterResetDoesNotTakeANewerAdmission(t *testing.T) {
	storeKinds(t, func(t *testing.T, newStore func(func() time.Time) limiter.Store) {
		clock := &limitertest.FixedClock{T: limitertest.MustParse(t, "2026-03-07T12:00:00Z")}
		s := newStore(clock.Now)
		ctx := context.Background()
		rule := &limiter.Rule{Name: "one", By: []string{"recipient"}, Limit: 1, Window: limiter.Window{Duration: time.Minute}}
		r := limitertest.Req(clock.T, limitertest.Vals{"recipient": "alice"}, rule)
		a := limitertest.MustDecide(t, s, r)
		if err := s.Reset(ctx, r); err != nil {
			t.Fatal(err)
		}
		limitertest.MustDecide(t, s, r)
		if ok, _ := s.Refund(ctx, a.ID()); ok {
			t.Errorf("refunding an admission forgotten by Reset gave back a newer one")
		}
	})
}

// In a bucketed log a refund leaves a tomb at the record's time; an
// admission in the same millisecond reuses that time and cannot be
// refunded. (Redis passes only because of the next bug.)
func TestRefundAfterReusedTimeInBucketedLog(t *testing.T) {
	storeKinds(t, func(t *testing.T, newStore func(func() time.Time) limiter.Store) {
		clock := &limitertest.FixedClock{T: limitertest.MustParse(t, "2026-03-07T12:00:00Z")}
		s := newStore(clock.Now)
		ctx := context.Background()
		rule := &limiter.Rule{Name: "coupons", By: []string{"campaign"}, Limit: 233300, Window: limiter.Window{Unit: limiter.Day}}
		r := limitertest.Req(clock.T, limitertest.Vals{"campaign": "c"}, rule)
		a := limitertest.MustDecide(t, s, r)
		if ok, _ := s.Refund(ctx, a.ID()); !ok {
			t.Fatal("first refund refused")
		}
		b := limitertest.MustDecide(t, s, r)
		if ok, _ := s.Refund(ctx, b.ID()); !ok {
			t.Errorf("the refund of a fresh admission was refused (ids %q and %q)", a.ID(), b.ID())
		}
	})
}

// A bucketed log whose every bucket has been refunded must still remember
// the refunds (its tombs): a repeated refund of an earlier admission must
// not take a later one from a bucket made after. Redis only: the script
// drops a sub-log that has tombs but no entries.
func TestRefundTwiceInEmptiedBucketedLog(t *testing.T) {
	storeKinds(t, func(t *testing.T, newStore func(func() time.Time) limiter.Store) {
		t0 := limitertest.MustParse(t, "2026-03-07T12:00:00Z")
		clock := &limitertest.FixedClock{T: t0}
		s := newStore(clock.Now)
		ctx := context.Background()
		rule := &limiter.Rule{Name: "coupons", By: []string{"campaign"}, Limit: 233300, Window: limiter.Window{Unit: limiter.Day}}
		at := func(ms int) *limiter.Request {
			return limitertest.Req(t0.Add(time.Duration(ms)*time.Millisecond), limitertest.Vals{"campaign": "c"}, rule)
		}
		a := limitertest.MustDecide(t, s, at(0))
		b := limitertest.MustDecide(t, s, at(1))
		clock.T = t0.Add(2 * time.Millisecond)
		for _, id := range []string{a.ID(), b.ID()} {
			if ok, _ := s.Refund(ctx, id); !ok {
				t.Fatalf("first refund of %q refused", id)
			}
		}
		limitertest.MustDecide(t, s, at(3))
		clock.T = t0.Add(4 * time.Millisecond)
		if ok, _ := s.Refund(ctx, a.ID()); ok {
			t.Errorf("a second refund of %q gave back a later admission", a.ID())
		}
		if d := limitertest.MustUsage(t, s, at(5)); d.Results[0].Used != 1 {
			t.Errorf("used %d after one admission left; want 1", d.Results[0].Used)
		}
	})
}

// Reset forgets a bucketed log with its tombs: refunding an admission it
// forgot then takes a later admission's units from the same bucket.
func TestRefundAfterResetInBucketedLog(t *testing.T) {
	storeKinds(t, func(t *testing.T, newStore func(func() time.Time) limiter.Store) {
		t0 := limitertest.MustParse(t, "2026-03-07T12:00:00Z")
		clock := &limitertest.FixedClock{T: t0.Add(time.Second)}
		s := newStore(clock.Now)
		ctx := context.Background()
		rule := &limiter.Rule{Name: "coupons", By: []string{"campaign"}, Limit: 233300, Window: limiter.Window{Unit: limiter.Day}}
		at := func(ms int) *limiter.Request {
			return limitertest.Req(t0.Add(time.Duration(ms)*time.Millisecond), limitertest.Vals{"campaign": "c"}, rule)
		}
		a := limitertest.MustDecide(t, s, at(0))
		if err := s.Reset(ctx, at(1)); err != nil {
			t.Fatal(err)
		}
		limitertest.MustDecide(t, s, at(2))
		if ok, _ := s.Refund(ctx, a.ID()); ok {
			t.Errorf("refunding an admission that Reset forgot took a later one")
		}
		if d := limitertest.MustUsage(t, s, at(3)); d.Results[0].Used != 1 {
			t.Errorf("used %d with one admission since the reset; want 1", d.Results[0].Used)
		}
	})
}
