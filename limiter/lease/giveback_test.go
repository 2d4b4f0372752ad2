package lease

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"
)

// Both stores refund part of a bucketed record from an id carrying a
// smaller cost, once, and never more than the bucket holds. This is what a
// block's give-back relies on (refundBlock).
func TestInnerStoresGiveBackPartOfABlock(t *testing.T) {
	storeKinds(t, func(t *testing.T, newInner func(func() time.Time) limiter.Store) {
		c := newClock(t0.Add(1234 * time.Millisecond))
		s := newInner(c.Now)
		ctx := context.Background()
		rule := coupons(0)
		block := check(rule, "c1")
		block.Cost = 1000
		d := mustDecide(t, s, req(block))
		recs, err := recordlog.DecodeID(d.ID())
		if err != nil || len(recs) != 1 || recs[0].C != 1000 || recs[0].Grain == 0 {
			t.Fatalf("block's id %v (%v): want one bucketed record of 1000", recs, err)
		}
		part := func(k, units int64) string {
			r := recs[0]
			r.T -= k
			r.C = units
			return recordlog.EncodeID([]recordlog.Recorded{r})
		}
		c.Add(time.Second)
		if ok, err := s.Refund(ctx, part(0, 300)); !ok || err != nil {
			t.Fatalf("giving back 300 of the block: %v %v", ok, err)
		}
		if got := used(t, s, check(rule, "c1")); got != 700 {
			t.Errorf("used %d after 300 of 1000 given back; want 700", got)
		}
		if ok, _ := s.Refund(ctx, part(0, 300)); ok {
			t.Errorf("the same give-back went through twice")
		}
		if ok, _ := s.Refund(ctx, part(0, 200)); ok {
			t.Errorf("a second give-back from the same record went through")
		}
		if ok, _ := s.Refund(ctx, part(1, 701)); ok {
			t.Errorf("a give-back of more than the bucket holds went through")
		}
		if got := used(t, s, check(rule, "c1")); got != 700 {
			t.Errorf("used %d after refused give-backs; want 700", got)
		}
	})
}

// Units a gateway took and did not spend go back to the store when the
// block's term ends (Expire) and when the gateway closes: the store then
// counts exactly what was spent.
func TestUnspentUnitsGoBackAtTermEndAndOnClose(t *testing.T) {
	storeKinds(t, func(t *testing.T, newInner func(func() time.Time) limiter.Store) {
		c := newClock(t0)
		inner := newInner(c.Now)
		rule := coupons(1000)
		ctx := context.Background()

		g := gateway(t, inner, c, time.Minute)
		for range 3 {
			if d := mustDecide(t, g, req(check(rule, "a"))); !d.Allowed {
				t.Fatalf("denied: %v", d.Results)
			}
		}
		if got := used(t, inner, check(rule, "a")); got != 1000 {
			t.Errorf("store counts %d during the term; want the block, 1000", got)
		}
		c.Add(time.Minute - time.Millisecond)
		if err := g.Expire(ctx); err != nil {
			t.Fatal(err)
		}
		if got := used(t, inner, check(rule, "a")); got != 1000 {
			t.Errorf("store counts %d before the term ends; want 1000", got)
		}
		c.Add(time.Millisecond)
		if err := g.Expire(ctx); err != nil {
			t.Fatal(err)
		}
		if got := used(t, inner, check(rule, "a")); got != 3 {
			t.Errorf("store counts %d after the term; want the 3 spent", got)
		}

		// A second block, given back by Close.
		for range 5 {
			mustDecide(t, g, req(check(rule, "a")))
		}
		if got := used(t, inner, check(rule, "a")); got != 1003 {
			t.Errorf("store counts %d with a second block; want 1003", got)
		}
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
		if got := used(t, inner, check(rule, "a")); got != 8 {
			t.Errorf("store counts %d after Close; want the 8 spent", got)
		}
		if _, err := g.Decide(ctx, req(check(rule, "a"))); err == nil {
			t.Errorf("a closed gateway decided a leased check")
		}
	})
}

// A give-back the store fails (Redis down at the end of a term) is sent
// again by the next sweeps until the store takes it, told once each way
// through OnGiveBack; and a send of the block refunded meanwhile carries
// what the block owes. Before, the units stayed counted until their record
// left the window: under a calendar day, each failed give-back took up to
// a block of the day's budget.
func TestAFailedGiveBackIsSentAgain(t *testing.T) {
	storeKinds(t, func(t *testing.T, newInner func(func() time.Time) limiter.Store) {
		for _, how := range []string{"by the sweep", "with a refunded send"} {
			t.Run(how, func(t *testing.T) {
				c := newClock(t0)
				inner := &failing{Store: newInner(c.Now)}
				rule := coupons(1000)
				ctx := context.Background()
				type told struct {
					units int64
					again bool
					err   bool
				}
				var mu sync.Mutex
				var tells []told
				g := New(inner, Options{Now: c.Now, Term: time.Minute, Sweep: -1, KeepInnerOpen: true,
					OnGiveBack: func(units int64, again bool, err error) {
						mu.Lock()
						tells = append(tells, told{units, again, err != nil})
						mu.Unlock()
					}})
				t.Cleanup(func() { g.Close() })
				campaign := how // a key of its own in the shared store
				var first *limiter.Decision
				for i := range 3 {
					d := mustDecide(t, g, req(check(rule, campaign)))
					if i == 0 {
						first = d
					}
				}
				inner.down.Store(true)
				c.Add(time.Minute)
				for range 2 {
					if err := g.Expire(ctx); err == nil && len(tells) == 0 {
						t.Fatal("the give-back did not fail")
					}
				}
				inner.down.Store(false)
				if got := used(t, inner, check(rule, campaign)); got != 1000 {
					t.Fatalf("store counts %d while the give-back fails; want the block, 1000", got)
				}
				want := int64(3)
				if how == "by the sweep" {
					if err := g.Expire(ctx); err != nil {
						t.Fatal(err)
					}
				} else {
					if ok, err := g.Refund(ctx, first.ID()); !ok || err != nil {
						t.Fatalf("refund: %v %v", ok, err)
					}
					want = 2
				}
				if got := used(t, inner, check(rule, campaign)); got != want {
					t.Errorf("store counts %d once it answers; want the %d spent", got, want)
				}
				if err := g.Expire(ctx); err != nil {
					t.Fatal(err)
				}
				if got := used(t, inner, check(rule, campaign)); got != want {
					t.Errorf("store counts %d after another sweep; want %d", got, want)
				}
				mu.Lock()
				defer mu.Unlock()
				wantTells := []told{{997, false, true}}
				if how == "by the sweep" {
					wantTells = append(wantTells, told{997, true, false})
				}
				if !slices.Equal(tells, wantTells) {
					t.Errorf("told %v; want %v", tells, wantTells)
				}
			})
		}
	})
}

// A send refunded into a block that gave its unspent units back already
// (a denial released them) and was set aside for a newer block is spent
// again by this gateway within the block's term: the store refunds a
// record once, so those units cannot go back to it, and before they were
// spent by no send either. A probe lost 1,818 units of a day of 5,000 so,
// with half its sends refunded.
func TestRefundAfterReleaseIsSpentAgain(t *testing.T) {
	storeKinds(t, func(t *testing.T, newInner func(func() time.Time) limiter.Store) {
		c := newClock(t0)
		inner := newInner(c.Now)
		rule := &limiter.Rule{Name: "budget", By: []string{"campaign"}, Limit: 2500, Window: limiter.Window{Unit: limiter.Day}, Lease: 1000}
		ctx := context.Background()
		g := gateway(t, inner, c, time.Minute)
		costs := func(n int64) *limiter.Request {
			ch := check(rule, "spring")
			ch.Cost = n
			return req(ch)
		}
		a := mustDecide(t, g, costs(500)) // the first block: 1000, 500 left
		if !a.Allowed {
			t.Fatalf("a denied: %v", a.Results)
		}
		if d := mustDecide(t, g, costs(1000)); !d.Allowed { // a second block, spent whole
			t.Fatalf("e denied: %v", d.Results)
		}
		// 500 remain in the store and 500 in the first block: a send of
		// 1100 is refused, and the gateway gives the first block's 500 back.
		if d := mustDecide(t, g, costs(1100)); d.Allowed {
			t.Fatalf("a send of 1100 admitted with 1000 left: %v", d.Results)
		}
		if got := used(t, inner, check(rule, "spring")); got != 1500 {
			t.Fatalf("store counts %d after the release; want 1500", got)
		}
		if ok, err := g.Refund(ctx, a.ID()); !ok || err != nil {
			t.Fatalf("refund of a: %v %v", ok, err)
		}
		// a's 500 are in the first block again: the next 500 are spent from
		// it, not asked of the store.
		if d := mustDecide(t, g, costs(500)); !d.Allowed {
			t.Fatalf("a send of the 500 refunded denied: %v", d.Results)
		}
		c.Add(time.Minute)
		if err := g.Expire(ctx); err != nil {
			t.Fatal(err)
		}
		if got := used(t, inner, check(rule, "spring")); got != 1500 {
			t.Errorf("store counts %d after the term; want the 1500 spent and kept (a's 500 refunded)", got)
		}
	})
}

// A gateway alone on a budget is told exactly what it spent, send after
// send, whichever block in hand a send takes from: the answer is the
// newest block's, less every block's unspent units. Taking from a block
// set aside answered from that block's older answer: a review saw used go
// 600, 1500, 1800, then back to 1000.
func TestAnswersFollowWhatWasSpent(t *testing.T) {
	storeKinds(t, func(t *testing.T, newInner func(func() time.Time) limiter.Store) {
		c := newClock(t0)
		g := gateway(t, newInner(c.Now), c, time.Minute)
		rule := &limiter.Rule{Name: "budget", By: []string{"campaign"}, Limit: 5000, Window: limiter.Window{Unit: limiter.Day}, Lease: 1000}
		spent := int64(0)
		for _, cost := range []int64{600, 500, 300, 400, 100} {
			ch := check(rule, "spring")
			ch.Cost = cost
			d := mustDecide(t, g, req(ch))
			spent += cost
			if !d.Allowed || d.Results[0].Used != spent || d.Results[0].Remaining != 5000-spent {
				t.Errorf("after a send of %d: allowed %v, used %d, remaining %d; want %d used", cost, d.Allowed, d.Results[0].Used, d.Results[0].Remaining, spent)
			}
		}
	})
}
