package caddymodule_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestBatchWithNoEntry proves that a batch whose batch dimension finds no
// entry (an empty array, or nothing under on_missing skip) turns no rule
// off: under skip it is one send without that dimension, so the rules by
// the others still count it and refuse it at their limit; under reject
// (the default) it is a 400 naming the dimension, since it names no
// recipient. On the memory store and on Redis.
func TestBatchWithNoEntry(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startUpstream(t)
		site := func(onMissing string) string {
			return fmt.Sprintf(`
	frequency_cap /send {
		key_prefix %s
		%s
		%s
		dimension recipient {json.to}
		dimension tok {json.tokens.*}
		rule per_recipient {
			by     recipient
			limit  2
			window 1m
		}
		rule per_tok {
			by     tok
			limit  2
			window 1m
		}
	}
	reverse_proxy %s`, testPrefix(), redisLine, onMissing, up.addr())
		}
		g := startGateway(t, site("on_missing skip tok"))
		alice := unique("alice")
		for i, body := range []string{
			fmt.Sprintf(`{"to":%q}`, alice),
			fmt.Sprintf(`{"to":%q,"tokens":[]}`, alice),
			fmt.Sprintf(`{"to":%q,"tokens":null}`, alice),
		} {
			want := http.StatusOK
			if i == 2 {
				want = http.StatusTooManyRequests // per_recipient: the third send of the minute
			}
			a := g.post("/send", "application/json", body)
			expectStatus(t, a, want)
			if i == 0 && a.header.Get("RateLimit-Policy") == "" && a.header.Get("RateLimit") == "" {
				t.Errorf("%s: no quota headers: %v", body, a.header)
			}
		}

		// A rule whose cost is read per entry has no cost without one:
		// left out, not a 400.
		g.load(fmt.Sprintf(`
	frequency_cap /send {
		key_prefix %s
		%s
		on_missing skip recipient
		dimension recipient {json.messages.*.to}
		dimension campaign {json.campaign}
		rule budget {
			by     campaign
			limit  100
			window 1h
			cost   {json.messages.*.segments}
		}
		rule per_campaign {
			by     campaign
			limit  1
			window 1m
		}
		rule per_recipient {
			by     recipient
			limit  5
			window 1m
		}
	}
	reverse_proxy %s`, testPrefix(), redisLine, up.addr()))
		camp := unique("c")
		expectStatus(t, g.post("/send", "application/json", fmt.Sprintf(`{"campaign":%q,"messages":[]}`, camp)), http.StatusOK)
		expectStatus(t, g.post("/send", "application/json", fmt.Sprintf(`{"campaign":%q,"messages":[]}`, camp)), http.StatusTooManyRequests)

		g.load(site(""))
		bob := unique("bob")
		a := g.post("/send", "application/json", fmt.Sprintf(`{"to":%q,"tokens":[]}`, bob))
		expectStatus(t, a, http.StatusBadRequest)
		if !strings.Contains(string(a.body), "missing value for dimension tok") {
			t.Errorf("an empty batch under reject: %s", a.body)
		}
	})
}
