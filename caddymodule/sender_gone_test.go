package caddymodule_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// TestSenderGoneStillSent proves that a sender who sends its whole
// request and hangs up at once (its side of the connection closed, which
// ends the request's context once the gateway has read the body for
// {json.to}) has its send decided, counted and delivered, as if it had
// waited: a probe's fire-and-forget sender had 20 of 20 counted and 8
// delivered (reverse_proxy gave up on a sender gone), and one that hung up
// while Redis decided had it recorded, undelivered and in no metric (here
// the hang-up lands before, during or after the decision as it happens:
// on the old code 4 of 40 were counted and none delivered). Nor
// is it a store failure: no store error counted (the metric the
// monitoring example pages on), and no local decision under on_error
// local (a probe so raised the store errors by 34 in 40 sends).
func TestSenderGoneStillSent(t *testing.T) {
	var delivered atomic.Int64
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		delivered.Add(1)
	}))
	defer up.Close()
	redisLine := "redis {\n\t\t\turl " + redistest.URL(t) + "\n\t\t\ttimeout 2s\n\t\t}"
	g := startGateway(t, capBlock("/send", redisLine, "name gone", "on_error local", "dimension recipient {json.to}", ruleBlock("two", "recipient", 1000))+
		"\treverse_proxy "+strings.TrimPrefix(up.URL, "http://"))
	before, _ := scrape(t)
	const sends = 40
	for i := 0; i < sends; i++ {
		c := dialRaw(t, g)
		c.head("/send", "Content-Type: application/json", "Content-Length: 12")
		c.write(`{"to":"fay"}`)
		if i%2 == 0 {
			c.Close() // fire and forget
			continue
		}
		c.CloseWrite()
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		var b [512]byte
		c.Read(b[:]) // whatever comes, until the gateway closes
		c.Close()
	}
	for deadline := time.Now().Add(5 * time.Second); delivered.Load() < sends && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	after, _ := scrape(t)
	for _, s := range []string{storeErrors("gone", "decide"), series("caddy_frequency_cap_decisions_by_store_total", "handler", "gone", "store", "local")} {
		if d := after[s] - before[s]; d != 0 {
			t.Errorf("%s rose by %v over %d sends whose senders went away", s, d, sends)
		}
	}
	if got := usageOf(t, "gone", "recipient=fay")["two"].Used; got != sends || delivered.Load() != sends {
		t.Errorf("%d delivered, %d counted, want %d both", delivered.Load(), got, sends)
	}

	// On the memory store the decision is quick, and the sender's close
	// is noticed while the upstream call is under way: a probe had 13 to
	// 31 of 40 delivered, 40 counted, where the request was passed on as
	// it was, its sender still there, and cut when it left.
	delivered.Store(0)
	g2 := startGateway(t, capBlock("/send", "", "name gone_mem", "dimension recipient {json.to}", ruleBlock("two", "recipient", 1000))+
		"\treverse_proxy "+strings.TrimPrefix(up.URL, "http://"))
	for i := 0; i < sends; i++ {
		c := dialRaw(t, g2)
		c.head("/send", "Content-Type: application/json", "Content-Length: 12")
		c.write(`{"to":"fay"}`)
		c.Close()
	}
	for deadline := time.Now().Add(5 * time.Second); delivered.Load() < sends && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	if got := usageOf(t, "gone_mem", "recipient=fay")["two"].Used; got != sends || delivered.Load() != sends {
		t.Errorf("memory store: %d delivered, %d counted, want %d both", delivered.Load(), got, sends)
	}
}
