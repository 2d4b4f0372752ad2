package caddymodule_test

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// strictStore is the store lines of the policy tests for redisLine (see
// eachBackend, whose Redis store has a timeout of seconds): either store
// answers 503 when it fails. With on_error allow, a decision starved of
// CPU on a loaded machine that timed out was let through unrecorded, and
// the next one was admitted over the limit: TestPolicyTiers/redis once
// admitted a 4th send for a limit of 3 so, with the default 100 ms.
func strictStore(redisLine string) string {
	return redisLine + "\n\t\ton_error deny"
}

// quietAround is a quiet range in zone that holds now: from the last whole
// minute to ten minutes on; and when it ends.
func quietAround(t *testing.T, zone string) (string, time.Time) {
	t.Helper()
	z, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().In(z)
	start := now.Truncate(time.Minute)
	end := start.Add(11 * time.Minute)
	return start.Format("15:04") + "-" + end.Format("15:04"), end
}

// TestPolicyQuiet proves, on both stores, that a quiet range in the
// recipient's zone denies with Retry-After exact to the second and records
// nothing, that the rule is out of the headers outside its range (another
// zone, the fallback zone), that an exempt request passes it and is
// counted, and that the admin API shows the quiet state.
func TestPolicyQuiet(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startUpstream(t)
		span, end := quietAround(t, "Asia/Tokyo")
		name := "quiet_" + strconv.FormatInt(prefixSeq.Load()+1, 10)
		g := startGateway(t, fmt.Sprintf(`
	frequency_cap {
		name %s
		%s
		key_prefix %s
		exempt {json.priority} otp
		dimension recipient {json.to}
		rule night {
			quiet %s {json.tz} UTC
		}
		rule hour {
			by recipient
			limit 5
			window 1h
		}
	}
	reverse_proxy %s`, name, strictStore(redisLine), testPrefix(), span, up.addr()))

		a := g.send("/", map[string]any{"to": "alice", "tz": "Asia/Tokyo"})
		expectStatus(t, a, http.StatusTooManyRequests)
		want := math.Ceil(time.Until(end).Seconds())
		got, _ := strconv.ParseFloat(a.header.Get("Retry-After"), 64)
		if math.Abs(got-want) > 1 {
			t.Errorf("Retry-After %v, want %v", got, want)
		}
		if p := a.header.Get("RateLimit-Policy"); !strings.Contains(p, `"night";q=0;w=660`) || !strings.Contains(p, `"hour";q=5`) {
			t.Errorf("RateLimit-Policy %q", p)
		}
		if r := a.header.Get("RateLimit"); !strings.Contains(r, fmt.Sprintf(`"night";r=0;t=%s`, a.header.Get("Retry-After"))) {
			t.Errorf("RateLimit %q, want night r=0;t=%s", r, a.header.Get("Retry-After"))
		}
		if p := a.problem(t); p.Rule != "night" || !strings.Contains(p.Window, "quiet") {
			t.Errorf("denial body %+v", p)
		}
		if up.count() != 0 {
			t.Fatalf("a quiet request reached the upstream")
		}
		u := usageOf(t, name, "recipient=alice&zone=Asia/Tokyo")
		if u["hour"].Used != 0 {
			t.Errorf("a quiet denial recorded %d", u["hour"].Used)
		}
		if n := u["night"]; n.Quiet == nil || !*n.Quiet || n.QuietUntil == nil || math.Abs(float64(*n.QuietUntil)-want) > 2 {
			t.Errorf("admin usage of the quiet rule: %+v", n)
		}
		if n := usageOf(t, name, "recipient=alice&zone=America/New_York")["night"]; n.Quiet == nil || *n.Quiet || *n.QuietUntil != 0 {
			t.Errorf("admin usage in another zone: %+v", n)
		}

		// Another zone, and no zone (the fallback, UTC): outside the range.
		for _, tz := range []string{"America/New_York", ""} {
			a = g.send("/", map[string]any{"to": "alice", "tz": tz})
			expectStatus(t, a, http.StatusOK)
			if strings.Contains(a.header.Get("RateLimit"), "night") {
				t.Errorf("zone %q: RateLimit %q names the quiet rule outside its range", tz, a.header.Get("RateLimit"))
			}
		}

		// Exempt: through the quiet range, and counted.
		before, _ := scrape(t)
		a = g.send("/", map[string]any{"to": "alice", "tz": "Asia/Tokyo", "priority": "otp"})
		expectStatus(t, a, http.StatusOK)
		after, _ := scrape(t)
		expectDeltas(t, before, after, map[string]float64{
			decisions(name, "night", "exempt"): 1,
			decisions(name, "hour", "exempt"):  1,
		})
		if u := usageOf(t, name, "recipient=alice"); u["hour"].Used != 3 {
			t.Errorf("after two admissions and an exempt one: used %d, want 3", u["hour"].Used)
		}
	})
}

// TestPolicyExempt proves, on both stores, that an exempt request passes a
// full rule with no quota fields (no rule could refuse it, so none may
// tell its client to wait), and the next normal request sees it counted.
func TestPolicyExempt(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startUpstream(t)
		g := startGateway(t, fmt.Sprintf(`
	frequency_cap {
		%s
		key_prefix %s
		exempt {json.priority} critical otp
		dimension recipient {json.to}
		rule hour {
			by recipient
			limit 2
			window 1h
		}
	}
	reverse_proxy %s`, strictStore(redisLine), testPrefix(), up.addr()))
		for i := 0; i < 2; i++ {
			expectStatus(t, g.send("/", map[string]any{"to": "bob"}), http.StatusOK)
		}
		expectStatus(t, g.send("/", map[string]any{"to": "bob"}), http.StatusTooManyRequests)
		a := g.send("/", map[string]any{"to": "bob", "priority": "critical"})
		expectStatus(t, a, http.StatusOK)
		for _, f := range []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Remaining", "X-RateLimit-Reset"} {
			if v := a.header.Get(f); v != "" {
				t.Errorf("exempt answer %s %q", f, v)
			}
		}
		// The exempt one is counted: one leaves the window only after
		// the first two.
		a = g.send("/", map[string]any{"to": "bob"})
		expectStatus(t, a, http.StatusTooManyRequests)
		if p := a.problem(t); len(p.Violated) != 1 || p.Violated[0].Used != 3 {
			t.Errorf("after an exempt request: %+v", p.Violated)
		}
		if up.count() != 3 {
			t.Errorf("upstream got %d, want 3", up.count())
		}
	})
}

// TestPolicyTiers proves, on both stores, that limit {placeholder} with
// Caddy's map gives each recipient its tier's limit, that a recipient
// changing tier keeps its history, and that a rule without a fallback
// answers 400 naming it when the placeholder gives no integer.
func TestPolicyTiers(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startUpstream(t)
		prefix := testPrefix()
		g := startGateway(t, fmt.Sprintf(`
	map {http.request.header.X-Tier} {tier_day} {
		gold 3
		default 1
	}
	frequency_cap /send {
		name tiers
		%[1]s
		key_prefix %[2]s
		dimension recipient {json.to}
		rule day {
			by recipient
			limit {tier_day} 2
			window 24h
		}
	}
	frequency_cap /strict {
		name strict
		%[1]s
		key_prefix %[2]s
		dimension recipient {json.to}
		rule minute {
			by recipient
			limit {http.request.header.X-Minute}
			window 1m
		}
	}
	reverse_proxy %[3]s`, strictStore(redisLine), prefix, up.addr()))

		send := func(who, tier string) *answer {
			return g.send("/send", map[string]any{"to": who}, "X-Tier: "+tier)
		}
		for i := 0; i < 3; i++ {
			expectStatus(t, send("gold-alice", "gold"), http.StatusOK)
		}
		a := send("gold-alice", "gold")
		expectStatus(t, a, http.StatusTooManyRequests)
		if p := a.header.Get("RateLimit-Policy"); p != `"day";q=3;w=86400` {
			t.Errorf("gold RateLimit-Policy %q", p)
		}
		expectStatus(t, send("bob", "bronze"), http.StatusOK)
		a = send("bob", "bronze")
		expectStatus(t, a, http.StatusTooManyRequests)
		if p := a.header.Get("RateLimit-Policy"); p != `"day";q=1;w=86400` {
			t.Errorf("default-tier RateLimit-Policy %q", p)
		}
		// Bob moves to gold mid-window: his one send is still counted.
		for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
			if a := send("bob", "gold"); a.status != want {
				t.Fatalf("bob's send %d as gold: %d, want %d", i, a.status, want)
			}
		}

		// No fallback: a missing or non-integer limit is a 400 naming the
		// rule; a good one decides.
		for _, h := range []string{"", "X-Minute: lots"} {
			a := g.send("/strict", map[string]any{"to": "carol"}, h)
			expectStatus(t, a, http.StatusBadRequest)
			if f := a.failure(t); f.Rule != "minute" {
				t.Errorf("400 body %+v does not name the rule", f)
			}
		}
		expectStatus(t, g.send("/strict", map[string]any{"to": "carol"}, "X-Minute: 1"), http.StatusOK)
		expectStatus(t, g.send("/strict", map[string]any{"to": "carol"}, "X-Minute: 1"), http.StatusTooManyRequests)
	})
}

// TestPolicyShadow proves, on both stores, that a dry_run rule beside a
// live one never denies but is recorded and reported, that its would-be
// denials of sends that passed are counted as dry_run_deny (those the live
// rule refused count nothing for it: a probe read 4 where 2 sends passed
// that it would have stopped), that the live rule still denies, and
// that a live denial records nothing in either rule.
func TestPolicyShadow(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startUpstream(t)
		name := "shadow_" + strconv.FormatInt(prefixSeq.Load()+1, 10)
		g := startGateway(t, fmt.Sprintf(`
	frequency_cap {
		name %s
		%s
		key_prefix %s
		dimension recipient {json.to}
		rule live {
			by recipient
			limit 3
			window 1h
		}
		rule trial {
			by recipient
			limit 1
			window 1h
			dry_run
		}
	}
	reverse_proxy %s`, name, strictStore(redisLine), testPrefix(), up.addr()))
		before, _ := scrape(t)
		expectStatus(t, g.send("/", map[string]any{"to": "dan"}), http.StatusOK)
		for i := 0; i < 2; i++ {
			a := g.send("/", map[string]any{"to": "dan"})
			expectStatus(t, a, http.StatusOK)
			// The shadow rule never refuses, so it does not tell the
			// client to wait: the fields are the live rule's alone.
			if r := a.header.Get("RateLimit"); strings.Contains(r, "trial") || !strings.HasPrefix(r, `"live";r=`) {
				t.Errorf("RateLimit %q reports the shadow rule", r)
			}
		}
		a := g.send("/", map[string]any{"to": "dan"})
		expectStatus(t, a, http.StatusTooManyRequests)
		if p := a.problem(t); p.Rule != "live" || len(p.Violated) != 1 {
			t.Errorf("live denial body %+v", p)
		}
		after, _ := scrape(t)
		expectDeltas(t, before, after, map[string]float64{
			decisions(name, "live", "allowed"):  3,
			decisions(name, "live", "denied"):   1,
			decisions(name, "trial", "allowed"): 1,
			// The 4th send, refused by live, would have been by trial
			// too: it stops nothing more, so counts nothing for trial.
			decisions(name, "trial", "dry_run_deny"): 2,
			decisions(name, "trial", "denied"):       0,
		})
		u := usageOf(t, name, "recipient=dan")
		if u["live"].Used != 3 || u["trial"].Used != 3 || u["trial"].Remaining != 0 {
			t.Errorf("usage after the live denial: live %+v, trial %+v; want 3 used in each", u["live"], u["trial"])
		}
	})
}

// TestPolicyQuietStoreDown proves that a quiet denial is answered from the
// quiet rule alone when the store cannot say what the other rules have
// left: the body and headers name the quiet rule and its range, not the
// window of a rule the store did not answer for.
func TestPolicyQuietStoreDown(t *testing.T) {
	up := startUpstream(t)
	span, _ := quietAround(t, "Asia/Tokyo")
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap {
		redis {
			address 127.0.0.1:%d
			timeout 200ms
		}
		key_prefix %s
		dimension recipient {json.to}
		rule hour {
			by recipient
			limit 5
			window 1h
		}
		rule night {
			quiet %s Asia/Tokyo
		}
	}
	reverse_proxy %s`, freePort(t), testPrefix(), span, up.addr()))
	a := g.send("/", map[string]any{"to": "alice"})
	expectStatus(t, a, http.StatusTooManyRequests)
	if p := a.problem(t); p.Rule != "night" || !strings.Contains(p.Window, "quiet") || len(p.Violated) != 1 || !strings.Contains(p.Violated[0].Window, "quiet") {
		t.Errorf("quiet denial with the store down: %+v", p)
	}
	if p := a.header.Get("RateLimit-Policy"); !strings.HasPrefix(p, `"night";q=0;w=660`) || strings.Contains(p, "hour") {
		t.Errorf("RateLimit-Policy %q, want the quiet rule alone", p)
	}
	if up.count() != 0 {
		t.Errorf("a quiet request reached the upstream")
	}
}
