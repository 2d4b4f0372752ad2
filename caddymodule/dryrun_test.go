package caddymodule_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestDryRun proves dry_run counts and reports like a live run but never
// blocks, and that the decision placeholders are set for later handlers.
func TestDryRun(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, fmt.Sprintf(`
	header >X-Cap-Rule        "{http.frequency_cap.rule}"
	header >X-Cap-Retry-After "{http.frequency_cap.retry_after}"
	header >X-Cap-Remaining   "{http.frequency_cap.remaining}"
	frequency_cap {
		key_prefix %s
		dry_run
		dimension recipient {json.to}
		rule once {
			by     recipient
			limit  1
			window 1m
		}
	}
	reverse_proxy %s`, testPrefix(), up.addr()))

	msg := map[string]any{"to": "alice"}
	a := g.send("/", msg)
	expectStatus(t, a, http.StatusOK)
	if a.header.Get("X-Cap-Rule") != "" || a.header.Get("X-Cap-Retry-After") != "0" || a.header.Get("X-Cap-Remaining") != "0" {
		t.Errorf("admitted placeholders: %v", a.header)
	}
	a = g.send("/", msg)
	expectStatus(t, a, http.StatusOK)
	if a.header.Get("RateLimit") == "" || !strings.HasPrefix(a.header.Get("RateLimit"), `"once";r=0;t=`) {
		t.Errorf("dry-run RateLimit %q does not tell the truth", a.header.Get("RateLimit"))
	}
	retry, _ := strconv.Atoi(a.header.Get("X-Cap-Retry-After"))
	if a.header.Get("X-Cap-Rule") != "once" || retry < 1 || retry > 60 {
		t.Errorf("would-deny placeholders: rule %q retry_after %q", a.header.Get("X-Cap-Rule"), a.header.Get("X-Cap-Retry-After"))
	}
	if up.count() != 2 {
		t.Errorf("upstream got %d, want 2", up.count())
	}
}

// TestDryRunAsIfLive proves dry_run end to end against a live twin fed the
// same sends: the dry run blocks nothing (every send reaches the
// upstream), its quota fields are those of the live run send by send, and
// its metrics match the live run's with dry_run_deny where the live run
// counted denied. Retry-After, which only a refusal carries, is absent.
func TestDryRunAsIfLive(t *testing.T) {
	liveUp, dryUp := startUpstream(t), startUpstream(t)
	caps := func(name, extra string) string {
		return fmt.Sprintf(`
		frequency_cap {
			name       %s
			key_prefix %s
			%s
			dimension recipient {json.to}
			dimension content   {json.content}
			rule recipient_minute {
				by     recipient
				limit  4
				window 1m
			}
			rule same_content {
				by     recipient content
				limit  2
				window 1m
			}
		}`, name, testPrefix(), extra)
	}
	g := startGateway(t, fmt.Sprintf(`
	handle /live {%s
		reverse_proxy %s
	}
	handle /dry {%s
		reverse_proxy %s
	}`, caps("d_live", ""), liveUp.addr(), caps("d_dry", "dry_run"), dryUp.addr()))

	before, _ := scrape(t)
	sends := []map[string]any{
		{"to": "alice", "content": "a"}, {"to": "alice", "content": "a"}, {"to": "alice", "content": "a"},
		{"to": "alice", "content": "b"}, {"to": "alice", "content": "c"}, {"to": "alice", "content": "d"},
		{"to": "bob", "content": "a"}, {"to": "alice", "content": "a"},
	}
	admitted, refused := 0, 0
	for i, msg := range sends {
		live := g.send("/live", msg)
		dry := g.send("/dry", msg)
		expectStatus(t, dry, http.StatusOK)
		if string(dry.body) != `{"status":"queued"}` {
			t.Errorf("send %d: the dry run answered %s, not the upstream", i, dry.body)
		}
		switch live.status {
		case http.StatusOK:
			admitted++
		case http.StatusTooManyRequests:
			refused++
		default:
			t.Fatalf("send %d: live status %d", i, live.status)
		}
		for _, h := range []string{"RateLimit-Policy", "X-RateLimit-Limit", "X-RateLimit-Remaining"} {
			if live.header.Get(h) != dry.header.Get(h) {
				t.Errorf("send %d: %s live %q, dry run %q", i, h, live.header.Get(h), dry.header.Get(h))
			}
		}
		if l, d := remainingOf(live.header.Get("RateLimit")), remainingOf(dry.header.Get("RateLimit")); l != d || l == "" {
			t.Errorf("send %d: RateLimit live %q, dry run %q", i, live.header.Get("RateLimit"), dry.header.Get("RateLimit"))
		}
		if dry.header.Get("Retry-After") != "" {
			t.Errorf("send %d: an admitted dry-run send carries Retry-After", i)
		}
	}
	if admitted != 5 || refused != 3 {
		t.Fatalf("live run admitted %d and refused %d, want 5 and 3", admitted, refused)
	}
	if liveUp.count() != admitted || dryUp.count() != len(sends) {
		t.Errorf("upstreams got live %d, dry %d; want %d, %d", liveUp.count(), dryUp.count(), admitted, len(sends))
	}

	after, _ := scrape(t)
	want := map[string]float64{}
	for _, rule := range []string{"recipient_minute", "same_content"} {
		for _, outcome := range []string{"allowed", "denied"} {
			live := after[decisions("d_live", rule, outcome)] - before[decisions("d_live", rule, outcome)]
			if outcome == "denied" {
				want[decisions("d_dry", rule, "dry_run_deny")] = live
				want[decisions("d_dry", rule, "denied")] = 0
			} else {
				want[decisions("d_dry", rule, outcome)] = live
			}
		}
	}
	if want[decisions("d_dry", "same_content", "dry_run_deny")] == 0 || want[decisions("d_dry", "recipient_minute", "dry_run_deny")] == 0 {
		t.Fatalf("the sends should have been refused by both rules in the live run: %v", want)
	}
	expectDeltas(t, before, after, want)
}

// remainingOf keeps the names and r= parameters of a RateLimit field:
// t= may differ by a second between two sends a few milliseconds apart.
func remainingOf(field string) string {
	var out []string
	for item := range strings.SplitSeq(field, ", ") {
		name, params, _ := strings.Cut(item, ";")
		r, _, _ := strings.Cut(params, ";")
		out = append(out, name+";"+r)
	}
	return strings.Join(out, ", ")
}
