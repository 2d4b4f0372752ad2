package caddymodule_test

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/dunglas/httpsfv"
)

// obeyingWait is how long a client that obeys every quota field waits
// before its next send after an answer with header h: Retry-After; for
// each item of RateLimit (draft-ietf-httpapi-ratelimit-headers-10, parsed
// as a structured-field list) with nothing remaining, its t; and
// X-RateLimit-Reset when X-RateLimit-Remaining is 0. It is the strictest
// reading of the fields, the one a well-behaved client library takes.
func obeyingWait(t *testing.T, h http.Header) time.Duration {
	t.Helper()
	wait := int64(0)
	if s := h.Get("Retry-After"); s != "" {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("Retry-After %q", s)
		}
		wait = max(wait, n)
	}
	if vs := h.Values("RateLimit"); len(vs) > 0 {
		list, err := httpsfv.UnmarshalList(vs)
		if err != nil {
			t.Fatalf("RateLimit %q is not a structured-field list: %v", vs, err)
		}
		for _, m := range list {
			item := m.(httpsfv.Item)
			r, _ := item.Params.Get("r")
			tt, _ := item.Params.Get("t")
			if r == int64(0) {
				wait = max(wait, tt.(int64))
			}
		}
	}
	if h.Get("X-RateLimit-Remaining") == "0" {
		n, _ := strconv.ParseInt(h.Get("X-RateLimit-Reset"), 10, 64)
		wait = max(wait, n)
	}
	return time.Duration(wait) * time.Second
}

// TestQuotaFieldsNeverMislead proves, with a client that obeys every quota
// field, that an admitted send never tells it to wait when its next send
// would be admitted: an exempt one-time password in quiet hours past a
// full rule, and a send under a shadow rule that is full. The last send a
// live rule admits, and a denial, do tell it to wait, exactly as long as
// the rule will refuse; under dry_run the fields say what a live run
// would (docs/configuration.md, Quota fields).
func TestQuotaFieldsNeverMislead(t *testing.T) {
	up := startUpstream(t)
	span, _ := quietAround(t, "UTC")
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap /otp {
		key_prefix %s
		exempt {json.priority} otp
		dimension recipient {json.to}
		rule night {
			quiet %s UTC
		}
		rule day {
			by     recipient
			limit  1
			window 24h
		}
	}
	frequency_cap /promo {
		key_prefix %s
		dimension recipient {json.to}
		rule live {
			by     recipient
			limit  2
			window 1h
		}
		rule trial {
			by     recipient
			limit  1
			window 1h
			dry_run
		}
	}
	frequency_cap /dry {
		key_prefix %s
		dry_run
		dimension recipient {json.to}
		rule hour {
			by     recipient
			limit  1
			window 1h
		}
	}
	reverse_proxy %s`, testPrefix(), span, testPrefix(), testPrefix(), up.addr()))

	for i := 0; i < 3; i++ {
		a := g.send("/otp", map[string]any{"to": "+15550100", "priority": "otp"})
		expectStatus(t, a, http.StatusOK)
		if w := obeyingWait(t, a.header); w != 0 {
			t.Errorf("exempt OTP %d in quiet hours past a full rule: the client waits %v (headers %v)", i, w, a.header)
		}
	}
	a := g.send("/otp", map[string]any{"to": "+15550100"})
	expectStatus(t, a, http.StatusTooManyRequests)
	if w := obeyingWait(t, a.header); w < time.Minute {
		t.Errorf("a send refused by quiet hours: the client waits only %v", w)
	}

	a = g.send("/promo", map[string]any{"to": "ann"})
	expectStatus(t, a, http.StatusOK)
	if w := obeyingWait(t, a.header); w != 0 {
		t.Errorf("first send, shadow rule now full: the client waits %v (RateLimit %q)", w, a.header.Get("RateLimit"))
	}
	a = g.send("/promo", map[string]any{"to": "ann"})
	expectStatus(t, a, http.StatusOK)
	if w := obeyingWait(t, a.header); w < 59*time.Minute {
		t.Errorf("the last send the live rule admits: the client waits %v, want about an hour", w)
	}
	expectStatus(t, g.send("/promo", map[string]any{"to": "ann"}), http.StatusTooManyRequests)

	expectStatus(t, g.send("/dry", map[string]any{"to": "bo"}), http.StatusOK)
	a = g.send("/dry", map[string]any{"to": "bo"})
	expectStatus(t, a, http.StatusOK)
	if w := obeyingWait(t, a.header); w < 59*time.Minute {
		t.Errorf("dry_run past its limit: the fields should say what a live run would, the client waits %v", w)
	}
}
