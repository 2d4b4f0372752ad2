package caddymodule_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestRejections proves that a missing dimension, a body that is not JSON,
// a body over max_body and a cost that is not a count are answered with a
// JSON reason and never reach the upstream; that a request with no body
// has no field (each dimension read from it is missing); and that
// on_missing skip leaves out only the rules whose dimension is missing.
func TestRejections(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap /strict {
		key_prefix %s
		max_body   64B
		dimension recipient {json.to}
		dimension channel   {http.request.header.X-Channel}
		rule per_channel {
			by     recipient channel
			limit  5
			window 1m
		}
		rule coins {
			by     recipient
			limit  100
			cost   {json.amount}
			window 1h
		}
	}
	frequency_cap /lenient {
		key_prefix %[1]s
		on_missing skip
		dimension recipient {json.to}
		dimension channel   {http.request.header.X-Channel}
		rule per_recipient {
			by     recipient
			limit  5
			window 1m
		}
		rule per_channel {
			by     recipient channel
			limit  5
			window 1m
		}
	}
	reverse_proxy %s`, testPrefix(), up.addr()))

	for _, tc := range []struct {
		name, body, header string
		status             int
		reason, dimension  string
	}{
		{"missing recipient", `{"amount":1}`, "X-Channel: sms", 400, "missing value for dimension recipient", "recipient"},
		{"missing header", `{"to":"a","amount":1}`, "", 400, "missing value for dimension channel", "channel"},
		{"empty recipient", `{"to":"","amount":1}`, "X-Channel: sms", 400, "missing value for dimension recipient", "recipient"},
		{"null recipient", `{"to":null,"amount":1}`, "X-Channel: sms", 400, "missing value for dimension recipient", "recipient"},
		{"malformed JSON", `{"to":"a",`, "X-Channel: sms", 400, "request body is not valid JSON", ""},
		{"trailing garbage", `{"to":"a","amount":1} x`, "X-Channel: sms", 400, "request body is not valid JSON", ""},
		// No body is no field: each dimension it has is missing.
		{"empty body", ``, "X-Channel: sms", 400, "missing value for dimension recipient", "recipient"},
		{"white space alone", " \r\n", "X-Channel: sms", 400, "missing value for dimension recipient", "recipient"},
		{"too large", `{"to":"a","amount":1,"pad":"` + strings.Repeat("x", 64) + `"}`, "X-Channel: sms", 413, "larger than max_body (64 bytes)", ""},
		{"fractional cost", `{"to":"a","amount":1.5}`, "X-Channel: sms", 400, `cost of rule coins is "1.5"`, ""},
		{"negative cost", `{"to":"a","amount":-1}`, "X-Channel: sms", 400, `cost of rule coins is "-1"`, ""},
		// Past limiter.MaxCost: cut short or wrapped around, it would pass
		// a spent budget.
		{"overflowing cost", `{"to":"a","amount":9223372036854775807}`, "X-Channel: sms", 400, `cost of rule coins is "9223372036854775807", not an integer from 0 to 4294967295`, ""},
		{"33-bit cost", `{"to":"a","amount":4294967296}`, "X-Channel: sms", 400, `cost of rule coins is "4294967296", not an integer from 0 to 4294967295`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := g.post("/strict", "application/json", tc.body, tc.header)
			if f := expectFailure(t, a, tc.status, tc.reason); f.Dimension != tc.dimension {
				t.Errorf("dimension %q, want %q", f.Dimension, tc.dimension)
			}
		})
	}
	if up.count() != 0 {
		t.Fatalf("the upstream was reached %d times by rejected requests", up.count())
	}

	a := g.post("/lenient", "application/json", `{"to":"alice"}`)
	expectStatus(t, a, http.StatusOK)
	if p := a.header.Get("RateLimit-Policy"); p != `"per_recipient";q=5;w=60` {
		t.Errorf("with a missing channel, RateLimit-Policy %q names more than per_recipient", p)
	}
	a = g.post("/lenient", "application/json", `{}`)
	expectStatus(t, a, http.StatusOK)
	if p := a.header.Get("RateLimit-Policy"); p != "" {
		t.Errorf("with every dimension missing, RateLimit-Policy %q", p)
	}
	// A request without a body (a GET through a cap set with no
	// matcher) is one without those fields: under skip it passes.
	a = g.post("/lenient", "application/json", ``)
	expectStatus(t, a, http.StatusOK)
	if up.count() != 3 {
		t.Errorf("upstream got %d, want 3", up.count())
	}
}
