package caddymodule_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestRuleWithoutByIsOneCountOverEverySend proves the global ceiling: a
// rule without by counts every send of the cap set together ("at most 3
// a minute in all"), beside per-recipient rules, on memory and Redis:
// the 4th send is denied whoever it is for, nothing denied is counted
// (a recipient denied by her own rule does not use the ceiling), and the
// admin API answers the ceiling's usage without a value for it.
func TestRuleWithoutByIsOneCountOverEverySend(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startUpstream(t)
		name := fmt.Sprintf("ceiling_%d", prefixSeq.Add(1))
		g := startGateway(t, fmt.Sprintf(`
	frequency_cap {
		name %s
		%s
		key_prefix %s
		dimension recipient {json.to}
		rule recipient_minute {
			by recipient
			limit 1
			window 1m
		}
		rule all_minute {
			limit 3
			window 1m
		}
	}
	reverse_proxy %s`, name, strictStore(redisLine), testPrefix(), up.addr()))

		expectStatus(t, g.send("/", map[string]any{"to": "alice"}), http.StatusOK)
		// alice's own rule denies: the ceiling is not spent by it.
		a := g.send("/", map[string]any{"to": "alice"})
		expectStatus(t, a, http.StatusTooManyRequests)
		if p := a.problem(t); p.Rule != "recipient_minute" {
			t.Errorf("alice's second send denied by %q, want recipient_minute", p.Rule)
		}
		expectStatus(t, g.send("/", map[string]any{"to": "bob"}), http.StatusOK)
		expectStatus(t, g.send("/", map[string]any{"to": "carol"}), http.StatusOK)
		a = g.send("/", map[string]any{"to": "dave"})
		expectStatus(t, a, http.StatusTooManyRequests)
		if p := a.problem(t); p.Rule != "all_minute" {
			t.Errorf("the 4th recipient denied by %q, want all_minute", p.Rule)
		}
		if up.count() != 3 {
			t.Errorf("the upstream got %d sends, want 3", up.count())
		}
		u := adminDo(t, http.MethodGet, "/frequency_cap/"+name+"/usage?recipient=dave")
		if u.status != http.StatusOK || !strings.Contains(string(u.body), `"all_minute"`) || !strings.Contains(string(u.body), `"used":3`) {
			t.Errorf("usage: %d %s", u.status, u.body)
		}
	})
}
