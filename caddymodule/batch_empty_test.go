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

		g.load(site(""))
		bob := unique("bob")
		a := g.post("/send", "application/json", fmt.Sprintf(`{"to":%q,"tokens":[]}`, bob))
		expectStatus(t, a, http.StatusBadRequest)
		if !strings.Contains(string(a.body), "missing value for dimension tok") {
			t.Errorf("an empty batch under reject: %s", a.body)
		}
	})
}
