package lease

import (
	"context"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// A batch under BatchEach takes each entry's unit from the block in
// order, decides the recipients' caps in one inner batch, and gives back
// the unit of each entry a cap denies; each admitted entry is refundable
// alone.
func TestBatchEach(t *testing.T) {
	storeKinds(t, func(t *testing.T, newInner func(func() time.Time) limiter.Store) {
		c := newClock(t0)
		inner := &counting{Store: newInner(c.Now)}
		g := gateway(t, inner, c, time.Minute)
		rule := coupons(100)
		entries := []limiter.Request{
			*req(check(rule, "c"), check(perRecipient, "alice")),
			*req(check(rule, "c"), check(perRecipient, "alice")), // her second: denied
			*req(check(rule, "c"), check(perRecipient, "bob")),
			*req(check(rule, "c")), // the budget alone: all local
		}
		ds, err := g.DecideBatch(context.Background(), entries, limiter.BatchEach)
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range []bool{true, false, true, true} {
			if ds[i].Allowed != want || ds[i].Recorded() != want {
				t.Errorf("entry %d: allowed=%v recorded=%v; want %v", i, ds[i].Allowed, ds[i].Recorded(), want)
			}
		}
		if ds[1].Denier != 1 {
			t.Errorf("entry 1's denier %d; want the recipient cap", ds[1].Denier)
		}
		// Units are taken entry by entry before the caps are decided, so
		// entry 3 still counts the unit alice's second entry gave back.
		if got := ds[3].Results[0].Used; got != 4 {
			t.Errorf("entry 3 sees %d used; want 4 (alice twice, bob, itself)", got)
		}
		if n := inner.batches.Load(); n != 1 {
			t.Errorf("%d inner batches; want 1", n)
		}
		if ok, err := g.Refund(context.Background(), ds[2].ID()); !ok || err != nil {
			t.Errorf("refund of bob's entry: %v %v", ok, err)
		}
		if d := mustDecide(t, g, req(check(perRecipient, "bob"))); !d.Allowed {
			t.Errorf("bob's cap was not refunded")
		}
		c.Add(time.Minute)
		g.Expire(context.Background())
		if got := used(t, inner, check(rule, "c")); got != 2 {
			t.Errorf("store counts %d after the term; want 2 (alice, entry 3)", got)
		}
	})
}

// A batch under BatchAll with a denied entry records nothing: every unit
// goes back, no entry has an id, and each is answered as decided in its
// place.
func TestBatchAll(t *testing.T) {
	storeKinds(t, func(t *testing.T, newInner func(func() time.Time) limiter.Store) {
		c := newClock(t0)
		inner := newInner(c.Now)
		g := gateway(t, inner, c, time.Minute)
		rule := coupons(100)
		entries := []limiter.Request{
			*req(check(rule, "c"), check(perRecipient, "alice")),
			*req(check(rule, "c")),
			*req(check(rule, "c"), check(perRecipient, "alice")),
		}
		ds, err := g.DecideBatch(context.Background(), entries, limiter.BatchAll)
		if err != nil {
			t.Fatal(err)
		}
		for i, want := range []bool{true, true, false} {
			if ds[i].Allowed != want || ds[i].Recorded() {
				t.Errorf("entry %d: allowed=%v recorded=%v; want allowed %v, nothing recorded", i, ds[i].Allowed, ds[i].Recorded(), want)
			}
		}
		ds, err = g.DecideBatch(context.Background(), entries[:2], limiter.BatchAll)
		if err != nil {
			t.Fatal(err)
		}
		if !ds[0].Allowed || !ds[1].Allowed || !ds[0].Recorded() || !ds[1].Recorded() {
			t.Errorf("a batch of two admitted entries: %v %v", ds[0], ds[1])
		}
		c.Add(time.Minute)
		g.Expire(context.Background())
		if got := used(t, inner, check(rule, "c")); got != 2 {
			t.Errorf("store counts %d after the term; want the 2 of the second batch", got)
		}
	})
}
