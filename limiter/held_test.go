package limiter

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestHeld proves, on every store, that Held lists every log held under
// one recipient, named by its other values as stored (a value over
// MaxValueLen by its hash, one with the key's reserved bytes unescaped),
// its weight and its records; that a Check with Sub reads and resets one
// of those logs exactly, hashed value or not; that logs whose records
// have all left their windows are not listed; and that another
// recipient's logs are neither listed nor touched.
func TestHeld(t *testing.T) {
	storeKinds(t, func(t *testing.T, newStore func(func() time.Time) Store) {
		ctx := context.Background()
		clock := &fixedClock{t: time.Date(2026, 3, 9, 12, 0, 0, 0, time.UTC)}
		s := newStore(clock.now)
		lister, ok := s.(Lister)
		if !ok {
			t.Fatalf("%T is no Lister", s)
		}
		rules := seedRules()
		budget := &Rule{Name: "budget", By: []string{"recipient"}, Weight: "amount", Limit: 100, Window: Window{Duration: time.Hour}}
		brief := &Rule{Name: "brief", By: []string{"recipient", "campaign"}, Limit: 5, Window: Window{Duration: time.Second}}
		long := strings.Repeat("a long message that is hashed in the key ", 3)
		t0 := clock.t
		send := func(at time.Duration, v vals, rs ...*Rule) {
			t.Helper()
			if d := mustDecide(t, s, req(t0.Add(at), v, rs...)); !d.Allowed {
				t.Fatalf("%v refused", v)
			}
		}
		send(0, vals{"recipient": "+15550100", "content": "hi & bye=%"}, rules...)
		send(time.Second, vals{"recipient": "+15550100", "content": long}, rules...)
		send(2*time.Second, vals{"recipient": "+15550100", "content": long}, rules...)
		budgetReq := req(t0.Add(3*time.Second), vals{"recipient": "+15550100"}, budget)
		budgetReq.Checks[0].Cost = 30
		mustDecide(t, s, budgetReq)
		send(4*time.Second, vals{"recipient": "+15550100", "campaign": "spring"}, brief)
		send(0, vals{"recipient": "bob", "content": "hi"}, rules...)

		now := t0.Add(10 * time.Second) // brief's second has passed
		held, err := lister.Held(ctx, "recipient", "+15550100", now)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]HeldLog{}
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
		plain := subOf(rules[2], []string{"+15550100", "hi & bye=%"})
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
		check := Check{Rule: rules[2], Values: []string{"+15550100", got[hashed].Values["content"]}, Sub: hashed}
		d, err := s.Usage(ctx, &Request{Checks: []Check{check}, Now: now})
		if err != nil || d.Results[0].Used != 2 {
			t.Fatalf("usage through Sub: %+v, %v; want 2 used", d, err)
		}
		if err := s.Reset(ctx, &Request{Checks: []Check{check}, Now: now}); err != nil {
			t.Fatal(err)
		}
		if d := mustUsage(t, s, req(now, vals{"recipient": "+15550100", "content": long}, rules[2])); d.Results[0].Used != 0 {
			t.Errorf("after a reset through Sub, the content counts %d", d.Results[0].Used)
		}
		if d := mustUsage(t, s, req(now, vals{"recipient": "+15550100"}, rules[0])); d.Results[0].Used != 3 {
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

// Every value survives the trip into a sub-log id and back, whatever bytes
// it holds; a value over MaxValueLen comes back as its hash.
func TestParseSubRoundTrip(t *testing.T) {
	r := &Rule{Name: "r", By: []string{"recipient", "content", "channel"}, Weight: "a$b"}
	for _, v := range []string{"", "plain", "#abc", "a&b=c$d#e%f{g}", "\x00\x7f é", strings.Repeat("x", MaxValueLen), strings.Repeat("y", MaxValueLen+1)} {
		sub := subOf(r, []string{"ignored", v, "sms"})
		h, err := parseSub(sub)
		if err != nil {
			t.Fatalf("%q: %v", sub, err)
		}
		want := v
		if len(v) > MaxValueLen {
			want = string(appendValue(nil, v))
		}
		if h.Values["content"] != want || h.Values["channel"] != "sms" || h.Weight != "a$b" || (len(h.Hashed) == 1) != (len(v) > MaxValueLen) {
			t.Errorf("%q: %+v", v, h)
		}
	}
	for _, bad := range []string{"content", "content=%2", "content=%G0", "=x"} {
		if _, err := parseSub(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// Behind on_error local, what the local store recorded during an outage
// is held too (it is enforced again at the next one): Fallback.Held lists
// the logs of both stores, each once.
func TestFallbackHeldListsBothStores(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 3, 9, 12, 0, 0, 0, time.UTC)
	primary := NewMemory(MemoryOptions{SweepInterval: -1})
	local := NewMemory(MemoryOptions{SweepInterval: -1})
	f := NewFallback(primary, local, 2)
	defer f.Close()
	rules := seedRules()
	mustDecide(t, primary, req(now, vals{"recipient": "amy", "content": "hi"}, rules...))
	mustDecide(t, local, req(now, vals{"recipient": "amy", "content": "hi"}, rules...))
	mustDecide(t, local, req(now, vals{"recipient": "amy", "content": "during the outage"}, rules...))
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
