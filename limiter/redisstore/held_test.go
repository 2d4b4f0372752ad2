package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
	"github.com/freqcap/caddy-freqcap/limiter/memstore"
)

// TestHeld proves, on every store, that Held lists every log held under
// one recipient, named by its other values as stored (a value over
// MaxValueLen by its hash, one with the key's reserved bytes unescaped),
// its weight and its records; that a Check with Sub reads and resets one
// of those logs exactly, hashed value or not; that logs whose records
// have all left their windows are not listed; and that another
// recipient's logs are neither listed nor touched.
func TestHeld(t *testing.T) {
	storeKinds(t, func(t *testing.T, newStore func(func() time.Time) limiter.Store) {
		ctx := context.Background()
		clock := &limitertest.FixedClock{T: time.Date(2026, 3, 9, 12, 0, 0, 0, time.UTC)}
		s := newStore(clock.Now)
		lister, ok := s.(limiter.Lister)
		if !ok {
			t.Fatalf("%T is no Lister", s)
		}
		rules := limitertest.SeedRules()
		budget := &limiter.Rule{Name: "budget", By: []string{"recipient"}, Weight: "amount", Limit: 100, Window: limiter.Window{Duration: time.Hour}}
		brief := &limiter.Rule{Name: "brief", By: []string{"recipient", "campaign"}, Limit: 5, Window: limiter.Window{Duration: time.Second}}
		long := strings.Repeat("a long message that is hashed in the key ", 3)
		t0 := clock.T
		send := func(at time.Duration, v limitertest.Vals, rs ...*limiter.Rule) {
			t.Helper()
			if d := limitertest.MustDecide(t, s, limitertest.Req(t0.Add(at), v, rs...)); !d.Allowed {
				t.Fatalf("%v refused", v)
			}
		}
		send(0, limitertest.Vals{"recipient": "+15550100", "content": "hi & bye=%"}, rules...)
		send(time.Second, limitertest.Vals{"recipient": "+15550100", "content": long}, rules...)
		send(2*time.Second, limitertest.Vals{"recipient": "+15550100", "content": long}, rules...)
		budgetReq := limitertest.Req(t0.Add(3*time.Second), limitertest.Vals{"recipient": "+15550100"}, budget)
		budgetReq.Checks[0].Cost = 30
		limitertest.MustDecide(t, s, budgetReq)
		send(4*time.Second, limitertest.Vals{"recipient": "+15550100", "campaign": "spring"}, brief)
		send(0, limitertest.Vals{"recipient": "bob", "content": "hi"}, rules...)

		now := t0.Add(10 * time.Second) // brief's second has passed
		held, err := lister.Held(ctx, "recipient", "+15550100", now)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]limiter.HeldLog{}
		for _, h := range held {
			got[h.Sub] = h
		}
		hashed := ""
		for sub, h := range got {
			if strings.HasPrefix(h.Values["content"], "#") {
				hashed = sub
			}
		}
		if len(held) != 4 || hashed == "" {
			t.Fatalf("held: %+v; want her own log, the budget, and two contents (one hashed)", held)
		}
		if h := got[""]; h.Records != 3 || len(h.Values) != 0 || h.Weight != "" {
			t.Errorf("her own log: %+v", h)
		}
		if h := got["$amount"]; h.Records != 1 || h.Weight != "amount" {
			t.Errorf("the budget's log: %+v", h)
		}
		plain := limiter.SubOf(rules[2], []string{"+15550100", "hi & bye=%"})
		if h := got[plain]; h.Records != 1 || h.Values["content"] != "hi & bye=%" || strings.Join(h.Dimensions(), ",") != "content" {
			t.Errorf("the plain content's log %q: %+v", plain, h)
		}
		if h := got[plain]; len(h.Hashed) != 0 {
			t.Errorf("the plain content's log is taken for hashed: %+v", h)
		}
		if h := got[hashed]; h.Records != 2 || len(h.Values["content"]) != 33 || strings.Join(h.Hashed, ",") != "content" {
			t.Errorf("the hashed content's log: %+v", h)
		}

		// Read and reset the hashed log through Sub: its value is not known.
		check := limiter.Check{Rule: rules[2], Values: []string{"+15550100", got[hashed].Values["content"]}, Sub: hashed}
		d, err := s.Usage(ctx, &limiter.Request{Checks: []limiter.Check{check}, Now: now})
		if err != nil || d.Results[0].Used != 2 {
			t.Fatalf("usage through Sub: %+v, %v; want 2 used", d, err)
		}
		if err := s.Reset(ctx, &limiter.Request{Checks: []limiter.Check{check}, Now: now}); err != nil {
			t.Fatal(err)
		}
		if d := limitertest.MustUsage(t, s, limitertest.Req(now, limitertest.Vals{"recipient": "+15550100", "content": long}, rules[2])); d.Results[0].Used != 0 {
			t.Errorf("after a reset through Sub, the content counts %d", d.Results[0].Used)
		}
		if d := limitertest.MustUsage(t, s, limitertest.Req(now, limitertest.Vals{"recipient": "+15550100"}, rules[0])); d.Results[0].Used != 3 {
			t.Errorf("her own log lost records: %d", d.Results[0].Used)
		}
		held, _ = lister.Held(ctx, "recipient", "+15550100", now)
		if len(held) != 3 {
			t.Errorf("after the reset: %+v", held)
		}
		if held, _ := lister.Held(ctx, "recipient", "bob", now); len(held) != 2 {
			t.Errorf("bob: %+v", held)
		}
		if held, err := lister.Held(ctx, "recipient", "nobody", now); err != nil || len(held) != 0 {
			t.Errorf("nobody: %+v, %v", held, err)
		}
	})
}

// Behind on_error local, what the local store recorded during an outage
// is held too (it is enforced again at the next one): Fallback.Held lists
// the logs of both stores, each once.
func TestFallbackHeldListsBothStores(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 3, 9, 12, 0, 0, 0, time.UTC)
	primary := memstore.New(memstore.Options{SweepInterval: -1})
	local := memstore.New(memstore.Options{SweepInterval: -1})
	f := limiter.NewFallback(primary, local, 2)
	defer f.Close()
	rules := limitertest.SeedRules()
	limitertest.MustDecide(t, primary, limitertest.Req(now, limitertest.Vals{"recipient": "amy", "content": "hi"}, rules...))
	limitertest.MustDecide(t, local, limitertest.Req(now, limitertest.Vals{"recipient": "amy", "content": "hi"}, rules...))
	limitertest.MustDecide(t, local, limitertest.Req(now, limitertest.Vals{"recipient": "amy", "content": "during the outage"}, rules...))
	held, err := f.Held(ctx, "recipient", "amy", now)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, h := range held {
		got = append(got, h.Values["content"])
	}
	if strings.Join(got, "|") != "|during the outage|hi" {
		t.Errorf("held %q; want her own log, then the two contents, each once", got)
	}
}
