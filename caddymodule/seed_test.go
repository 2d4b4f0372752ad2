package caddymodule_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/freqcap/caddy-freqcap/caddymodule"
)

// seedSite is the seed config (see the README) in front of upstream, with
// extra subdirectives.
func seedSite(redisLine, upstream, extra string) string {
	return fmt.Sprintf(`
	frequency_cap /v1/send* {
		%s
		key_prefix %s
		%s
		dimension recipient {json.to}
		dimension content   {json.content}
		rule recipient_minute {
			by     recipient
			limit  15
			window 1m
		}
		rule recipient_day {
			by     recipient
			limit  50
			window 24h
		}
		rule same_content_59s {
			by     recipient content
			limit  2
			window 59s
		}
		rule same_content_59m {
			by     recipient content
			limit  5
			window 59m
		}
	}
	reverse_proxy %s`, redisLine, testPrefix(), extra, upstream)
}

// TestSeedConfig proves the seed caps end to end: 15 sends a minute to one
// recipient pass, the 16th is refused naming recipient_minute; the same
// content a third time within 59 s is refused naming same_content_59s; the
// quota headers carry the exact values, on admitted answers on top of the
// upstream's own, and a denial never reaches the upstream.
func TestSeedConfig(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startUpstream(t)
		g := startGateway(t, seedSite(redisLine, up.addr(), ""))

		first := g.send("/v1/send", map[string]any{"to": "alice", "content": "hello 0"})
		expectStatus(t, first, http.StatusOK)
		if string(first.body) != `{"status":"queued"}` || first.header.Get("X-Upstream") != "push" {
			t.Errorf("admitted answer is not the upstream's: %q %v", first.body, first.header)
		}
		wantHeaders := map[string]string{
			"RateLimit-Policy":      `"recipient_minute";q=15;w=60, "recipient_day";q=50;w=86400, "same_content_59s";q=2;w=59, "same_content_59m";q=5;w=3540`,
			"RateLimit":             `"recipient_minute";r=14;t=60, "recipient_day";r=49;t=86400, "same_content_59s";r=1;t=59, "same_content_59m";r=4;t=3540`,
			"X-RateLimit-Limit":     "2",
			"X-RateLimit-Remaining": "1",
			"X-RateLimit-Reset":     "59",
		}
		for k, v := range wantHeaders {
			if got := first.header.Get(k); got != v {
				t.Errorf("%s: %q, want %q", k, got, v)
			}
		}

		for i := 1; i < 15; i++ {
			a := g.send("/v1/send", map[string]any{"to": "alice", "content": fmt.Sprintf("hello %d", i)})
			expectStatus(t, a, http.StatusOK)
		}
		denied := g.send("/v1/send", map[string]any{"to": "alice", "content": "hello 15"})
		expectStatus(t, denied, http.StatusTooManyRequests)
		if up.count() != 15 {
			t.Errorf("upstream got %d sends, want 15", up.count())
		}
		p := denied.problem(t)
		retry, _ := strconv.Atoi(denied.header.Get("Retry-After"))
		if p.Rule != "recipient_minute" || p.Limit != 15 || p.Window != "1m0s" ||
			p.Status != 429 || p.Title != "Too Many Requests" || p.Type != caddymodule.ProblemType {
			t.Errorf("denial body %s", denied.body)
		}
		if retry < 1 || retry > 60 || p.RetryAfter != int64(retry) {
			t.Errorf("Retry-After %q, body retry_after %d", denied.header.Get("Retry-After"), p.RetryAfter)
		}
		if v := p.Violated; len(v) != 1 || v[0].Rule != "recipient_minute" || v[0].Used != 15 || v[0].Remaining != 0 {
			t.Errorf("violated %+v", v)
		}
		if rl := denied.header.Get("RateLimit"); !strings.HasPrefix(rl, `"recipient_minute";r=0;t=`) {
			t.Errorf("RateLimit on the denial: %q", rl)
		}
		if denied.header.Get("X-RateLimit-Remaining") != "0" || denied.header.Get("X-RateLimit-Limit") != "15" {
			t.Errorf("X-RateLimit-* on the denial: %v", denied.header)
		}

		for i := 0; i < 2; i++ {
			expectStatus(t, g.send("/v1/send", map[string]any{"to": "bob", "content": "same"}), http.StatusOK)
		}
		third := g.send("/v1/send", map[string]any{"to": "bob", "content": "same"})
		expectStatus(t, third, http.StatusTooManyRequests)
		if rule := third.problem(t).Rule; rule != "same_content_59s" {
			t.Errorf("third same content denied by %v, want same_content_59s", rule)
		}
		if up.count() != 17 {
			t.Errorf("upstream got %d sends, want 17", up.count())
		}
	})
}
