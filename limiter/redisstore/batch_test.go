package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// batchOf builds a batch of n entries of the seed config for who, entry i
// with the content content(i).
func batchOf(now time.Time, who string, n int, content func(i int) string) []limiter.Request {
	rules := limitertest.SeedRules()
	reqs := make([]limiter.Request, n)
	for i := range reqs {
		reqs[i] = *limitertest.Req(now, limitertest.Vals{"recipient": who, "content": content(i)}, rules...)
	}
	return reqs
}

// The seed config over one batch of 20 messages for one recipient, each with
// its own content: under BatchEach the first 15 are admitted and recorded,
// each with its own refundable id, and the last 5 are denied by
// recipient_minute; under BatchAll the same 5 are denied and nothing at all
// is recorded, so a single send afterwards finds the full quota.
func TestBatchSeedConfig(t *testing.T) {
	t0 := limitertest.MustParse(t, "2026-03-01T10:00:00Z")
	distinct := func(i int) string { return fmt.Sprint("msg", i) }
	storeKinds(t, func(t *testing.T, newStore func(func() time.Time) limiter.Store) {
		clock := &limitertest.FixedClock{T: t0.Add(time.Second)} // refunds run on the store's clock
		s := newStore(clock.Now)
		ds := limitertest.MustBatch(t, s, batchOf(t0, "each", 20, distinct), limiter.BatchEach)
		ids := map[string]bool{}
		for i, d := range ds {
			if d.Allowed != (i < 15) {
				t.Fatalf("BatchEach entry %d: allowed=%v", i, d.Allowed)
			}
			if d.Allowed {
				if !d.Recorded() || ids[d.ID()] {
					t.Fatalf("entry %d: id %q recorded=%v, seen before %v", i, d.ID(), d.Recorded(), ids[d.ID()])
				}
				ids[d.ID()] = true
				if got := d.Results[0].Used; got != int64(i+1) {
					t.Fatalf("entry %d: recipient_minute used %d; want %d (the entries before it count)", i, got, i+1)
				}
				continue
			}
			if d.Recorded() || d.Denier != 0 || d.Results[0].Rule.Name != "recipient_minute" || d.RetryAfter != time.Minute {
				t.Fatalf("entry %d: denier %d retry %s recorded %v; want recipient_minute, 1m, nothing", i, d.Denier, d.RetryAfter, d.Recorded())
			}
		}
		if u := limitertest.MustUsage(t, s, limitertest.Req(t0.Add(time.Second), limitertest.Vals{"recipient": "each", "content": "x"}, limitertest.SeedRules()...)); u.Results[0].Used != 15 {
			t.Fatalf("after BatchEach: %d used; want 15", u.Results[0].Used)
		}
		// Each admitted entry refunds on its own.
		for id := range ids {
			if ok, err := s.Refund(context.Background(), id); !ok || err != nil {
				t.Fatalf("refund of an admitted entry: %v %v", ok, err)
			}
		}
		if u := limitertest.MustUsage(t, s, limitertest.Req(t0.Add(time.Second), limitertest.Vals{"recipient": "each", "content": "x"}, limitertest.SeedRules()...)); u.Results[0].Used != 0 {
			t.Fatalf("after the refunds: %d used; want 0", u.Results[0].Used)
		}

		ds = limitertest.MustBatch(t, s, batchOf(t0, "all", 20, distinct), limiter.BatchAll)
		for i, d := range ds {
			if d.Allowed != (i < 15) || d.Recorded() {
				t.Fatalf("BatchAll entry %d: allowed=%v recorded=%v; want allowed=%v, nothing recorded", i, d.Allowed, d.Recorded(), i < 15)
			}
		}
		d := limitertest.MustDecide(t, s, limitertest.Req(t0.Add(time.Second), limitertest.Vals{"recipient": "all", "content": "x"}, limitertest.SeedRules()...))
		if !d.Allowed || d.Results[0].Used != 1 || d.Results[1].Used != 1 {
			t.Fatalf("a send after a rejected batch: %s; want admitted with used 1", limitertest.Describe(d))
		}
		// A BatchAll whose entries all pass records them all.
		ds = limitertest.MustBatch(t, s, batchOf(t0, "all-ok", 3, distinct), limiter.BatchAll)
		for i, d := range ds {
			if !d.Allowed || !d.Recorded() {
				t.Fatalf("BatchAll entry %d of an admitted batch: allowed=%v recorded=%v", i, d.Allowed, d.Recorded())
			}
		}
		if u := limitertest.MustUsage(t, s, limitertest.Req(t0.Add(time.Second), limitertest.Vals{"recipient": "all-ok", "content": "x"}, limitertest.SeedRules()...)); u.Results[0].Used != 3 {
			t.Fatalf("after an admitted BatchAll: %d used; want 3", u.Results[0].Used)
		}
	})
}

// Duplicates within a batch count one after another: the third copy of a
// content for one recipient is denied by same_content_59s as a third
// request would be, while other recipients of the batch are untouched.
func TestBatchDuplicates(t *testing.T) {
	t0 := limitertest.MustParse(t, "2026-03-01T10:00:00Z")
	storeKinds(t, func(t *testing.T, newStore func(func() time.Time) limiter.Store) {
		s := newStore(nil)
		rules := limitertest.SeedRules()
		var reqs []limiter.Request
		for _, who := range []string{"ann", "bob", "ann", "ann", "bob"} {
			reqs = append(reqs, *limitertest.Req(t0, limitertest.Vals{"recipient": who, "content": "same"}, rules...))
		}
		ds := limitertest.MustBatch(t, s, reqs, limiter.BatchEach)
		want := []bool{true, true, true, false, true}
		for i, d := range ds {
			if d.Allowed != want[i] {
				t.Fatalf("entry %d: %s; want allowed=%v", i, limitertest.Describe(d), want[i])
			}
		}
		if name := ds[3].Results[ds[3].Denier].Rule.Name; name != "same_content_59s" {
			t.Fatalf("the third copy was denied by %s", name)
		}
	})
}

// An empty batch decides nothing; a batch in an unknown mode or past
// MaxBatch is refused before any store is touched.
func TestBatchBounds(t *testing.T) {
	storeKinds(t, func(t *testing.T, newStore func(func() time.Time) limiter.Store) {
		s := newStore(nil)
		if ds, err := s.DecideBatch(context.Background(), nil, limiter.BatchAll); err != nil || len(ds) != 0 {
			t.Fatalf("empty batch: %v %v", ds, err)
		}
		if _, err := s.DecideBatch(context.Background(), make([]limiter.Request, 1), limiter.BatchMode(7)); err == nil {
			t.Fatal("an unknown mode was accepted")
		}
		if _, err := s.DecideBatch(context.Background(), make([]limiter.Request, limiter.MaxBatch+1), limiter.BatchEach); err == nil {
			t.Fatal("a batch past MaxBatch was accepted")
		}
	})
}

// The admissions of a batch's entries, joined into one id, are refunded
// by one Refund, once; ids of local decisions are joined apart.
func TestJoinIDsRefundsABatchAtOnce(t *testing.T) {
	t0 := limitertest.MustParse(t, "2026-03-01T10:00:00Z")
	storeKinds(t, func(t *testing.T, newStore func(func() time.Time) limiter.Store) {
		clock := &limitertest.FixedClock{T: t0.Add(time.Second)}
		s := newStore(clock.Now)
		ds := limitertest.MustBatch(t, s, batchOf(t0, "joined", 5, func(i int) string { return fmt.Sprint(i) }), limiter.BatchEach)
		var ids []string
		for _, d := range ds {
			ids = append(ids, d.ID())
		}
		joined := limiter.JoinIDs(ids)
		if len(joined) != 1 {
			t.Fatalf("%d joined ids; want 1", len(joined))
		}
		if ok, err := s.Refund(context.Background(), joined[0]); !ok || err != nil {
			t.Fatalf("refund of the joined id: %v %v", ok, err)
		}
		if ok, _ := s.Refund(context.Background(), joined[0]); ok {
			t.Fatal("a joined id was refunded twice")
		}
		if u := limitertest.MustUsage(t, s, limitertest.Req(t0.Add(time.Second), limitertest.Vals{"recipient": "joined", "content": "x"}, limitertest.SeedRules()...)); u.Results[0].Used != 0 {
			t.Fatalf("after the joined refund: %d used; want 0", u.Results[0].Used)
		}
	})
	// A local decision's id starts with a 0 byte (see Fallback).
	got := limiter.JoinIDs([]string{"a", "\x00b", "c", "\x00d"})
	if want := []string{"ac", "\x00bd"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("JoinIDs = %q; want %q", got, want)
	}
}

// A script run indexes its keys in two bytes: a batch with more keys than
// that (33,000 entries, each over two keys) is split into runs that fit,
// and every entry is recorded under its own keys.
func TestBatchPastARunsKeys(t *testing.T) {
	if testing.Short() {
		t.Skip("a 66,000-key batch")
	}
	client := redistest.Client(t)
	s := New(client, Options{Timeout: 20 * time.Second, ScriptOnly: true, Prefix: "runkeys:"})
	defer s.Close()
	perRecipient := &limiter.Rule{Name: "recipient_minute", By: []string{"recipient"}, Limit: 15, Window: limiter.Window{Duration: time.Minute}}
	perCampaign := &limiter.Rule{Name: "campaign_minute", By: []string{"campaign"}, Limit: 15, Window: limiter.Window{Duration: time.Minute}}
	const n = 33_000
	reqs := make([]limiter.Request, n)
	for i := range reqs {
		reqs[i] = *limitertest.Req(time.Time{}, limitertest.Vals{"recipient": fmt.Sprint("r", i), "campaign": fmt.Sprint("c", i)}, perRecipient, perCampaign)
	}
	for i, d := range limitertest.MustBatch(t, s, reqs, limiter.BatchEach) {
		if !d.Allowed {
			t.Fatalf("entry %d denied: %s", i, limitertest.Describe(d))
		}
	}
	for _, i := range []int{0, 32_767, 32_768, n - 1} {
		u := limitertest.MustUsage(t, s, &reqs[i])
		if u.Results[0].Used != 1 || u.Results[1].Used != 1 {
			t.Fatalf("entry %d: %s; want each of its keys to hold its one record", i, limitertest.Describe(u))
		}
	}
}
