package caddymodule_test

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestHangUpStaysCountedUnderRefund4xx proves that a sender who hangs up
// once the upstream has its message keeps it counted under refund_on 4xx:
// reverse_proxy answers a gone client 499, which 4xx matches, and a probe
// so got 30 messages delivered against a cap of 10 by hanging up after
// each. The upstream here takes the message, then answers late.
func TestHangUpStaysCountedUnderRefund4xx(t *testing.T) {
	var mu sync.Mutex
	delivered := map[string]int{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		delivered[r.URL.Path]++
		mu.Unlock()
		select {
		case <-r.Context().Done():
		case <-time.After(3 * time.Second):
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer up.Close()
	g := startGateway(t, capBlock("/send", "", "refund_on 5xx 4xx", "dimension recipient {http.request.header.X-To}", ruleBlock("two", "recipient", 2))+
		capBlock("/batch", "", "refund_on 5xx 4xx", "dimension recipient {json.*.to}", ruleBlock("two", "recipient", 2))+
		"\treverse_proxy "+strings.TrimPrefix(up.URL, "http://"))
	count := func(path string) int {
		mu.Lock()
		defer mu.Unlock()
		return delivered[path]
	}
	const body = `[{"to":"dora"}]`
	for _, path := range []string{"/send", "/batch"} {
		t.Run(path, func(t *testing.T) {
			for i := 0; i < 5; i++ {
				c := dialRaw(t, g)
				c.head(path, "Content-Type: application/json", fmt.Sprintf("Content-Length: %d", len(body)), "X-To: dora")
				c.write(body)
				// Until the upstream has it (or the cap said no), then hang up.
				for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
					if n := count(path); n > i || n >= 2 {
						break
					}
				}
				c.SetLinger(0)
				c.Close()
				time.Sleep(50 * time.Millisecond) // a refund, were there one
			}
			if n := count(path); n != 2 {
				t.Errorf("the upstream got %d messages to dora, want the cap's 2", n)
			}
			expectStatus(t, g.post(path, "application/json", body, "X-To: dora"), http.StatusTooManyRequests)
		})
	}
}

// TestCutErrorAnswerRefunded proves that an upstream's answer whose status
// refund_on names is refunded when its body breaks off: reverse_proxy
// then panics with http.ErrAbortHandler after the status went out, which
// unwound past the refund, so a probe's recipient stayed counted for five
// sends the upstream said failed.
func TestCutErrorAnswerRefunded(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, buf, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		buf.WriteString("HTTP/1.1 500 Internal Server Error\r\nContent-Length: 100\r\n\r\n0123456789")
		buf.Flush()
		conn.Close()
	}))
	defer up.Close()
	g := startGateway(t, capBlock("/send", "", "refund_on 5xx", "dimension recipient {http.request.header.X-To}", ruleBlock("two", "recipient", 2))+
		"\treverse_proxy "+strings.TrimPrefix(up.URL, "http://"))
	for i := 0; i < 5; i++ {
		c := dialRaw(t, g)
		c.head("/send", "Content-Length: 2", "X-To: erin")
		c.write("{}")
		// The answer's head only: its body breaks off, as the upstream's.
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		res, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatalf("send %d: no answer: %v", i+1, err)
		}
		if res.StatusCode != http.StatusInternalServerError {
			t.Fatalf("send %d: status %d, want the upstream's 500 (each refunded)", i+1, res.StatusCode)
		}
		io.Copy(io.Discard, res.Body) // until the gateway aborts: the refund is made by then
		c.Close()
	}
}

// TestCutErrorAnswerRefundedInBatches proves the same of batches: a
// batch's entries are given back when the upstream's 500 breaks off, a
// plain batch and one whose answer is spliced (answer expo, batch drop)
// alike.
func TestCutErrorAnswerRefundedInBatches(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.ReadAll(r.Body)
		if r.Header.Get("X-Cut") == "" {
			w.Header().Set("Content-Type", "application/json")
			w.Write([]byte(`{"data":[{"status":"ok","id":"1"}]}`))
			return
		}
		conn, buf, _ := w.(http.Hijacker).Hijack()
		buf.WriteString("HTTP/1.1 500 Internal Server Error\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"data\":[")
		buf.Flush()
		conn.Close()
	}))
	defer up.Close()
	g := startGateway(t, capBlock("/batch", "", "refund_on 5xx", "dimension recipient {json.*.to}", ruleBlock("one", "recipient", 1))+
		capBlock("/drop", "", "refund_on 5xx", "answer expo", "batch drop", "dimension recipient {json.*.to}", ruleBlock("one", "recipient", 1))+
		"\treverse_proxy "+strings.TrimPrefix(up.URL, "http://"))
	send := func(path, body string) {
		c := dialRaw(t, g)
		c.head(path, "Content-Type: application/json", fmt.Sprintf("Content-Length: %d", len(body)), "X-Cut: 1")
		c.write(body)
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		io.Copy(io.Discard, c)
		c.Close()
	}
	for i := 0; i < 3; i++ {
		send("/batch", `[{"to":"x"}]`)
	}
	if a := g.post("/batch", "application/json", `[{"to":"x"}]`); a.status != 200 {
		t.Errorf("plain batch: after 3 cut 500s, status %d %s (not refunded)", a.status, a.body)
	}
	expectStatus(t, g.post("/drop", "application/json", `[{"to":"capped"}]`), 200)
	for i := 0; i < 3; i++ {
		send("/drop", `[{"to":"y"},{"to":"capped"}]`)
	}
	if a := g.post("/drop", "application/json", `[{"to":"y"}]`); a.status != 200 || strings.Contains(string(a.body), "MessageRateExceeded") {
		t.Errorf("spliced batch: after 3 cut 500s, %d %s (not refunded)", a.status, a.body)
	}
}
