package caddymodule_test

import (
	"fmt"
	"net/http"
	"testing"
)

// TestReloadKeepsCounters proves that a config reload with the same store
// keeps the counts (the memory store lives on in the pool), and that a
// changed limit applies at once to the history already recorded.
func TestReloadKeepsCounters(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startUpstream(t)
		site := func(limit int) string {
			return fmt.Sprintf(`
	frequency_cap {
		%s
		key_prefix %s
		dimension recipient {json.to}
		rule r {
			by     recipient
			limit  %d
			window 1h
		}
	}
	reverse_proxy %s`, redisLine, "reload:", limit, up.addr())
		}
		remaining := func(g *gateway) string {
			t.Helper()
			a := g.send("/", map[string]any{"to": t.Name()})
			expectStatus(t, a, http.StatusOK)
			return a.header.Get("X-RateLimit-Remaining")
		}
		g := startGateway(t, site(10))
		for i := 0; i < 3; i++ {
			remaining(g)
		}
		g.reloadSame()
		if r := remaining(g); r != "6" {
			t.Errorf("after reloading the same config: remaining %s, want 6", r)
		}
		g.load(site(20))
		if r := remaining(g); r != "15" {
			t.Errorf("after raising the limit to 20: remaining %s, want 15", r)
		}
	})
}

// TestAdminReload proves the name registry follows config reloads: a
// reload of the same config (the new handler provisions before the old
// one is cleaned up) keeps the name answering, with the counts; a config
// without the name makes it 404; a renamed cap set answers by its new
// name.
func TestAdminReload(t *testing.T) {
	up := startUpstream(t)
	prefix := testPrefix()
	site := func(name string) string {
		return fmt.Sprintf(`
	frequency_cap {
		name       %s
		key_prefix %s
		dimension recipient {json.to}
		rule r {
			by     recipient
			limit  5
			window 1m
		}
	}
	reverse_proxy %s`, name, prefix, up.addr())
	}
	g := startGateway(t, site("reload_a"))
	expectStatus(t, g.send("/", map[string]any{"to": "alice"}), http.StatusOK)
	expectUsage(t, usageOf(t, "reload_a", "recipient=alice"), map[string][2]int64{"r": {1, 4}})
	g.reloadSame()
	g.reloadSame()
	expectUsage(t, usageOf(t, "reload_a", "recipient=alice"), map[string][2]int64{"r": {1, 4}})

	g.load(site("reload_b"))
	expectStatus(t, adminDo(t, http.MethodGet, "/frequency_cap/reload_a/usage?recipient=alice"), http.StatusNotFound)
	expectUsage(t, usageOf(t, "reload_b", "recipient=alice"), map[string][2]int64{"r": {1, 4}})
}

// TestMetricsSurviveReload proves the counters are the process's, not the
// config's: a reload keeps counting where the last config stopped, and
// the new config's /metrics serves them.
func TestMetricsSurviveReload(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap {
		name       m_reload
		key_prefix %s
		dimension recipient {json.to}
		rule r {
			by     recipient
			limit  100
			window 1m
		}
	}
	reverse_proxy %s`, testPrefix(), up.addr()))
	before, _ := scrape(t)
	expectStatus(t, g.send("/", map[string]any{"to": "a"}), http.StatusOK)
	g.reloadSame()
	expectStatus(t, g.send("/", map[string]any{"to": "a"}), http.StatusOK)
	after, _ := scrape(t)
	expectDeltas(t, before, after, map[string]float64{decisions("m_reload", "r", "allowed"): 2})
}
