package caddymodule_test

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"testing"
)

// TestCalendarDay proves a calendar-day rule refuses until the next local
// midnight of its zone: Retry-After is the seconds to it, in the fixed zone
// of the rule, in the zone a request names, or in the fallback zone when the
// named zone is unknown.
func TestCalendarDay(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startUpstream(t)
		g := startGateway(t, fmt.Sprintf(`
	frequency_cap /fixed {
		%s
		key_prefix %s
		dimension recipient {json.to}
		rule shanghai_day {
			by       recipient
			limit    1
			calendar day Asia/Shanghai
		}
	}
	frequency_cap /local {
		%[1]s
		key_prefix %[2]s
		dimension recipient {json.to}
		rule local_day {
			by       recipient
			limit    1
			calendar day {json.tz} Pacific/Auckland
		}
	}
	reverse_proxy %s`, redisLine, testPrefix(), up.addr()))

		for _, tc := range []struct{ path, to, tz, zone string }{
			{"/fixed", "alice", "", "Asia/Shanghai"},
			{"/local", "bob", "America/New_York", "America/New_York"},
			{"/local", "carol", "Not/A_Zone", "Pacific/Auckland"},
			{"/local", "dave", "", "Pacific/Auckland"},
		} {
			msg := map[string]any{"to": tc.to, "tz": tc.tz}
			expectStatus(t, g.send(tc.path, msg), http.StatusOK)
			a := g.send(tc.path, msg)
			expectStatus(t, a, http.StatusTooManyRequests)
			want := secondsToMidnight(t, tc.zone)
			got, _ := strconv.ParseFloat(a.header.Get("Retry-After"), 64)
			if math.Abs(got-want) > 2 {
				t.Errorf("%s %s: Retry-After %v, want %v (next midnight in %s)", tc.path, tc.to, got, want, tc.zone)
			}
			if w := a.problem(t).Window; w != "calendar day "+tc.zone {
				t.Errorf("%s %s: window %v, want calendar day %s", tc.path, tc.to, w, tc.zone)
			}
		}
	})
}

// TestCostBudget proves a cost rule counts amounts, not requests: with
// 1000 a calendar month, 600 passes, 500 more is refused, 400 fits.
func TestCostBudget(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startUpstream(t)
		g := startGateway(t, fmt.Sprintf(`
	frequency_cap {
		%s
		key_prefix %s
		dimension recipient {json.to}
		rule coins_month {
			by       recipient
			limit    1000
			cost     {json.amount}
			calendar month
		}
	}
	reverse_proxy %s`, redisLine, testPrefix(), up.addr()))

		a := g.send("/", map[string]any{"to": "alice", "amount": 600})
		expectStatus(t, a, http.StatusOK)
		if a.header.Get("X-RateLimit-Remaining") != "400" {
			t.Errorf("after 600: remaining %q", a.header.Get("X-RateLimit-Remaining"))
		}
		a = g.send("/", map[string]any{"to": "alice", "amount": 500})
		expectStatus(t, a, http.StatusTooManyRequests)
		if p := a.problem(t); p.Rule != "coins_month" || p.Limit != 1000 || p.Window != "calendar month UTC" {
			t.Errorf("denial %s", a.body)
		}
		a = g.send("/", map[string]any{"to": "alice", "amount": "400"})
		expectStatus(t, a, http.StatusOK)
		if a.header.Get("X-RateLimit-Remaining") != "0" {
			t.Errorf("after 1000: remaining %q", a.header.Get("X-RateLimit-Remaining"))
		}
		expectStatus(t, g.send("/", map[string]any{"to": "alice", "amount": 0}), http.StatusOK)
		expectStatus(t, g.send("/", map[string]any{"to": "alice", "amount": 1}), http.StatusTooManyRequests)

		// A send that costs more than the limit never passes: its
		// denial says so, not only when to retry.
		a = g.send("/", map[string]any{"to": "carol", "amount": 1001})
		expectStatus(t, a, http.StatusTooManyRequests)
		if p := a.problem(t); !strings.Contains(p.Detail, "this send costs 1001: no wait admits it") {
			t.Errorf("a send above the limit: detail %q", p.Detail)
		}
	})
}

// TestCostZeroPastTheLimit proves a send that costs 0 counts nothing and
// so is never refused, even where the rule's count is past its limit: an
// exempt send, or a lower per-request limit, puts it there. Before, the
// check was used + cost <= limit, and a cost of 0 was refused for the
// rest of the period.
func TestCostZeroPastTheLimit(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startUpstream(t)
		g := startGateway(t, fmt.Sprintf(`
	frequency_cap {
		%s
		key_prefix %s
		dimension recipient {json.to}
		exempt {json.priority} otp
		rule coins_day {
			by       recipient
			limit    {json.tier} 10
			cost     {json.amount}
			calendar day
		}
	}
	reverse_proxy %s`, redisLine, testPrefix(), up.addr()))

		expectStatus(t, g.send("/", map[string]any{"to": "ann", "amount": 15, "priority": "otp"}), http.StatusOK)
		expectStatus(t, g.send("/", map[string]any{"to": "ann", "amount": 0}), http.StatusOK)
		expectStatus(t, g.send("/", map[string]any{"to": "ann", "amount": 1}), http.StatusTooManyRequests)

		expectStatus(t, g.send("/", map[string]any{"to": "bob", "amount": 8, "tier": 10}), http.StatusOK)
		expectStatus(t, g.send("/", map[string]any{"to": "bob", "amount": 0, "tier": 5}), http.StatusOK)
		expectStatus(t, g.send("/", map[string]any{"to": "bob", "amount": 1, "tier": 5}), http.StatusTooManyRequests)
	})
}
