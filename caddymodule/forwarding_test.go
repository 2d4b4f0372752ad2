package caddymodule_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
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
// answers 500 or does not answer at all, and keeps it for other statuses;
// a refunded answer carries no quota fields (they would count the send it
// gave back, and hold a client back from a send that would pass).
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
			for _, k := range []string{"RateLimit", "RateLimit-Policy", "X-RateLimit-Remaining", "X-RateLimit-Limit", "X-RateLimit-Reset"} {
				if v := a.header.Get(k); v != "" {
					t.Fatalf("send %d answered 500 and refunded carries %s: %s", i, k, v)
				}
			}
		}
		for i := 0; i < 3; i++ {
			a := g.send("/dead", msg)
			expectStatus(t, a, http.StatusBadGateway)
			if v := a.header.Get("X-RateLimit-Remaining") + a.header.Get("RateLimit"); v != "" {
				t.Fatalf("send %d to a dead upstream, refunded, carries quota fields: %s", i, v)
			}
		}
		first := g.send("/v1/send", msg, "X-Want-Status: 404")
		expectStatus(t, first, http.StatusNotFound)
		if first.header.Get("X-RateLimit-Remaining") != "1" {
			t.Errorf("the 404, counted: remaining %q, want 1", first.header.Get("X-RateLimit-Remaining"))
		}
		expectStatus(t, g.send("/v1/send", msg), http.StatusOK)
		denied := g.send("/v1/send", msg)
		expectStatus(t, denied, http.StatusTooManyRequests)
		if up.count() != 5 {
			t.Errorf("upstream got %d, want 5", up.count())
		}
	})
}

// TestNoRefundWhenTheSenderHangsUp proves that a sender who hangs up after
// its request reached the upstream, before the upstream answered, keeps
// the send counted under refund_on 5xx: the upstream has the whole
// message and may deliver it, so a refund would let a sender go past a
// cap by hanging up after every send. (An upstream that does not answer
// in time, or at all, is refunded: TestRefund.)
func TestNoRefundWhenTheSenderHangsUp(t *testing.T) {
	arrived, release := make(chan struct{}, 1), make(chan struct{})
	var held atomic.Bool
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if held.CompareAndSwap(false, true) {
			arrived <- struct{}{}
			<-release // answers once the sender has gone
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer up.Close()
	defer close(release)
	g := twoASendGateway(t, "5xx", up.URL)

	ctx, cancel := context.WithCancel(context.Background())
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, g.url+"/v1/send", strings.NewReader(`{"to":"dave"}`))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	done := make(chan error, 1)
	go func() {
		res, err := client.Do(req)
		if err == nil {
			res.Body.Close()
		}
		done <- err
	}()
	<-arrived
	cancel()
	if err := <-done; err == nil {
		t.Fatal("the abandoned request got an answer")
	}
	// The send stays counted: one more is admitted, the next denied.
	time.Sleep(100 * time.Millisecond) // the gateway sees the hang-up
	next := g.send("/v1/send", map[string]any{"to": "dave"})
	expectStatus(t, next, http.StatusOK)
	if got := next.header.Get("X-RateLimit-Remaining"); got != "0" {
		t.Fatalf("after a hang-up and one send: remaining %s, want 0 (the abandoned send counted)", got)
	}
	expectStatus(t, g.send("/v1/send", map[string]any{"to": "dave"}), http.StatusTooManyRequests)
}

// A refunded answer loses the gateway's quota fields but keeps the
// upstream's own: a provider's 429 with its X-RateLimit-Reset, refunded
// under refund_on 429, still tells the sender when the provider takes
// more.
func TestRefundKeepsTheUpstreamsQuota(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-RateLimit-Reset", "1700000000")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer up.Close()
	g := twoASendGateway(t, "429", up.URL)
	for i := 0; i < 3; i++ {
		a := g.send("/v1/send", map[string]any{"to": "erin"})
		expectStatus(t, a, http.StatusTooManyRequests)
		if got := a.header.Values("X-RateLimit-Reset"); len(got) != 1 || got[0] != "1700000000" {
			t.Errorf("send %d: X-RateLimit-Reset %q, want the provider's alone", i, got)
		}
		if v := a.header.Get("X-RateLimit-Remaining") + a.header.Get("RateLimit"); v != "" {
			t.Errorf("send %d, refunded, carries the gateway's quota: %s", i, v)
		}
	}
}

// twoASendGateway is a gateway capping each recipient at 2 sends a minute
// under refund_on refundOn, in front of the upstream at upURL.
func twoASendGateway(t *testing.T, refundOn, upURL string) *gateway {
	return startGateway(t, fmt.Sprintf(`
	frequency_cap {
		key_prefix %s
		refund_on  %s
		dimension recipient {json.to}
		rule two {
			by     recipient
			limit  2
			window 1m
		}
	}
	reverse_proxy %s`, testPrefix(), refundOn, strings.TrimPrefix(upURL, "http://")))
}
