package caddymodule_test

import (
	"fmt"
	"net/http"
	"testing"
)

// TestBodyPassthrough proves the upstream receives the body byte for byte
// with the same Content-Length, for JSON and form bodies, and that JSON
// numbers are values exactly as sent (1.50 and 1.5 are different values).
func TestBodyPassthrough(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap /json {
		key_prefix %s
		dimension recipient {json.message.to.0}
		dimension amount    {json.amount}
		rule once {
			by     recipient amount
			limit  1
			window 1m
		}
	}
	frequency_cap /form {
		key_prefix %[1]s
		dimension recipient {form.to}
		rule once {
			by     recipient
			limit  1
			window 1m
		}
	}
	reverse_proxy %s`, testPrefix(), up.addr()))

	bodies := []string{
		"{\"message\": {\"to\": [\"alice\", \"bob\"], \"text\": \"caf\\u00e9 \u4f60\u597d\"},\n  \"amount\": 1.50 }\n",
		`{"message":{"to":["alice"]},"amount":1.5}`,
	}
	for _, b := range bodies {
		a := g.post("/json", "application/json", b)
		expectStatus(t, a, http.StatusOK)
		got := up.last()
		if string(got.body) != b || got.contentLength != int64(len(b)) {
			t.Errorf("upstream got %q (Content-Length %d), want %q (%d)", got.body, got.contentLength, b, len(b))
		}
	}
	expectStatus(t, g.post("/json", "application/json", bodies[0]), http.StatusTooManyRequests)

	// A field no placeholder reads may repeat (one that is read may not:
	// see TestHostileRepeatedFormField).
	form := "to=carol&text=hi+there%21&tag=a&tag=b"
	expectStatus(t, g.post("/form", "application/x-www-form-urlencoded", form), http.StatusOK)
	if got := up.last(); string(got.body) != form || got.contentLength != int64(len(form)) {
		t.Errorf("upstream got %q (Content-Length %d), want %q", got.body, got.contentLength, form)
	}
	denied := g.post("/form", "application/x-www-form-urlencoded", "to=carol")
	expectStatus(t, denied, http.StatusTooManyRequests)
}

// TestRefund proves refund_on 5xx gives the quota back when the upstream
// answers 500 or does not answer at all, and keeps it for other statuses.
func TestRefund(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startUpstream(t)
		prefix := testPrefix()
		caps := fmt.Sprintf(`
		%s
		key_prefix %s
		refund_on  5xx
		dimension recipient {json.to}
		rule two {
			by     recipient
			limit  2
			window 1m
		}`, redisLine, prefix)
		g := startGateway(t, fmt.Sprintf(`
	handle /dead {
		frequency_cap {%s
		}
		reverse_proxy 127.0.0.1:%d
	}
	handle {
		frequency_cap {%[1]s
		}
		reverse_proxy %[3]s
	}`, caps, freePort(t), up.addr()))

		msg := map[string]any{"to": "alice"}
		for i := 0; i < 3; i++ {
			a := g.send("/v1/send", msg, "X-Want-Status: 500")
			expectStatus(t, a, http.StatusInternalServerError)
			if a.header.Get("X-RateLimit-Remaining") != "1" {
				t.Fatalf("send %d answered 500 yet was counted: remaining %s", i, a.header.Get("X-RateLimit-Remaining"))
			}
		}
		for i := 0; i < 3; i++ {
			expectStatus(t, g.send("/dead", msg), http.StatusBadGateway)
		}
		first := g.send("/v1/send", msg, "X-Want-Status: 404")
		expectStatus(t, first, http.StatusNotFound)
		expectStatus(t, g.send("/v1/send", msg), http.StatusOK)
		denied := g.send("/v1/send", msg)
		expectStatus(t, denied, http.StatusTooManyRequests)
		if up.count() != 5 {
			t.Errorf("upstream got %d, want 5", up.count())
		}
	})
}
