package caddymodule_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// Hostile bodies through a real in-process Caddy: over, at and under
// max_body, chunked, truncated and stalled; hostile_values_test.go has the
// hostile values.

// paddedMessage is a JSON message to `to` of exactly n bytes.
func paddedMessage(t *testing.T, to string, n int) string {
	t.Helper()
	s := fmt.Sprintf(`{"to":%q,"pad":""}`, to)
	if len(s) > n {
		t.Fatalf("a message to %q cannot be as short as %d bytes", to, n)
	}
	return s[:len(s)-2] + strings.Repeat("x", n-len(s)) + `"}`
}

// rawConn is a raw connection to the gateway, for requests that net/http
// would not send: chunks of chosen sizes, bodies shorter than their
// Content-Length, bodies that stall.
type rawConn struct {
	t *testing.T
	*net.TCPConn
}

func dialRaw(t *testing.T, g *gateway) *rawConn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
	if err != nil {
		t.Fatalf("dialing the gateway: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{t: t, TCPConn: c.(*net.TCPConn)}
}

// head writes a request line and headers ("Name: value" each).
func (c *rawConn) head(path string, headers ...string) {
	c.t.Helper()
	c.write(fmt.Sprintf("POST %s HTTP/1.1\r\nHost: gateway\r\n%s\r\n", path, strings.Join(append(headers, ""), "\r\n")))
}

func (c *rawConn) write(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		c.t.Fatalf("writing to the gateway: %v", err)
	}
}

// chunked writes body in chunks of the given sizes (the last size repeats),
// then the last chunk.
func (c *rawConn) chunked(body string, sizes ...int) {
	c.t.Helper()
	var b strings.Builder
	for i := 0; len(body) > 0; i++ {
		n := min(sizes[min(i, len(sizes)-1)], len(body))
		ext := ""
		if i == 1 {
			ext = ";note=ignored" // a chunk extension changes nothing
		}
		fmt.Fprintf(&b, "%x%s\r\n%s\r\n", n, ext, body[:n])
		body = body[n:]
	}
	b.WriteString("0\r\n\r\n")
	c.write(b.String())
}

// answer reads the response, failing the test unless it arrives within
// bound.
func (c *rawConn) answer(bound time.Duration) *answer {
	c.t.Helper()
	start := time.Now()
	c.SetReadDeadline(start.Add(bound))
	res, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		c.t.Fatalf("no answer within %s (after %s): %v", bound, time.Since(start).Round(time.Millisecond), err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		c.t.Fatalf("reading the answer: %v", err)
	}
	return &answer{status: res.StatusCode, header: res.Header, body: b}
}

// TestHostileBodySize proves max_body is exact: a body of exactly max_body
// bytes passes, byte for byte, with a Content-Length or chunked; one byte
// more is answered 413 with a JSON reason and never reaches the upstream;
// and a Content-Length over the limit is answered at once, before the
// body is sent.
func TestHostileBodySize(t *testing.T) {
	const maxBody = 1024
	up := startUpstream(t)
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap {
		key_prefix %s
		max_body   1KiB
		dimension  recipient {json.to}
		%s
	}
	reverse_proxy %s`, testPrefix(), ruleBlock("many", "recipient", 100), up.addr()))

	exact := paddedMessage(t, "alice", maxBody)
	a := g.post("/v1/send", "application/json", exact)
	expectStatus(t, a, http.StatusOK)
	if got := up.last(); string(got.body) != exact || got.contentLength != maxBody {
		t.Errorf("upstream got %d bytes (Content-Length %d), want the %d sent", len(got.body), got.contentLength, maxBody)
	}
	over := paddedMessage(t, "alice", maxBody+1)
	expectFailure(t, g.post("/v1/send", "application/json", over), http.StatusRequestEntityTooLarge, "larger than max_body (1024 bytes)")

	c := dialRaw(t, g)
	c.head("/v1/send", "Content-Type: application/json", "Transfer-Encoding: chunked")
	c.chunked(exact, 1, 100, 7)
	a = c.answer(5 * time.Second)
	expectStatus(t, a, http.StatusOK)
	if got := up.last(); string(got.body) != exact {
		t.Errorf("upstream got %d bytes of a chunked body, want the %d sent", len(got.body), maxBody)
	}
	c = dialRaw(t, g)
	c.head("/v1/send", "Content-Type: application/json", "Transfer-Encoding: chunked")
	c.chunked(over, 1000, 1)
	expectFailure(t, c.answer(5*time.Second), http.StatusRequestEntityTooLarge, "larger than max_body")

	// 1 GiB announced, nothing sent: the answer cannot wait for the body.
	c = dialRaw(t, g)
	c.head("/v1/send", "Content-Type: application/json", "Content-Length: 1073741824")
	expectFailure(t, c.answer(2*time.Second), http.StatusRequestEntityTooLarge, "larger than max_body")

	// A chunked stream that never ends is cut off after max_body+1 bytes.
	c = dialRaw(t, g)
	c.head("/v1/send", "Content-Type: application/json", "Transfer-Encoding: chunked")
	go func() {
		chunk := fmt.Sprintf("%x\r\n%s\r\n", 4096, strings.Repeat(" ", 4096))
		for i := 0; i < 1024; i++ {
			if _, err := io.WriteString(c, chunk); err != nil {
				return // the gateway has answered and hung up
			}
		}
	}()
	expectFailure(t, c.answer(5*time.Second), http.StatusRequestEntityTooLarge, "larger than max_body")

	if n := up.count(); n != 2 {
		t.Errorf("upstream got %d requests, want the 2 of exactly max_body", n)
	}
}

// TestHostileChunked proves a chunked body (no Content-Length), in chunks
// that split names, values and multi-byte characters, is read whole for
// the placeholders and handed to the upstream byte for byte.
func TestHostileChunked(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap /json {
		key_prefix %s
		dimension  recipient {json.message.to.1}
		%s
	}
	frequency_cap /form {
		key_prefix %s
		dimension  recipient {form.to}
		%s
	}
	reverse_proxy %s`, testPrefix(), ruleBlock("once", "recipient", 1), testPrefix(), ruleBlock("once", "recipient", 1), up.addr()))

	send := func(path, contentType, body string, sizes ...int) *answer {
		c := dialRaw(t, g)
		c.head(path, "Content-Type: "+contentType, "Transfer-Encoding: chunked")
		c.chunked(body, sizes...)
		return c.answer(5 * time.Second)
	}
	jsonBody := "{\"message\": {\"to\": [\"decoy\", \"caf\u00e9 \u4f60\u597d\"], \"text\": \"\\u00e9\"},\n \"n\": 1.50}\n"
	for _, tc := range []struct {
		path, contentType, body, other string
	}{
		{"/json", "application/json", jsonBody, strings.Replace(jsonBody, "\u4f60", "\u4f61", 1)},
		{"/form", "application/x-www-form-urlencoded", "text=hi+there&to=caf%C3%A9+%E4%BD%A0&x=%7B%7D", "to=caf%C3%A9+%E4%BD%A1"},
	} {
		before := up.count()
		a := send(tc.path, tc.contentType, tc.body, 1, 2, 3, 5, 8)
		expectStatus(t, a, http.StatusOK)
		if got := up.last(); string(got.body) != tc.body {
			t.Errorf("%s: upstream got %q, want %q", tc.path, got.body, tc.body)
		}
		if rl := a.header.Get("RateLimit"); rl != `"once";r=0;t=60` {
			t.Errorf("%s: RateLimit %q", tc.path, rl)
		}
		// The same recipient in other chunks is the same recipient...
		expectStatus(t, send(tc.path, tc.contentType, tc.body, 64), http.StatusTooManyRequests)
		// ...and one character more is another.
		expectStatus(t, send(tc.path, tc.contentType, tc.other, 2), http.StatusOK)
		if n := up.count() - before; n != 2 {
			t.Errorf("%s: upstream got %d requests, want 2", tc.path, n)
		}
	}
}

// TestHostileTruncated proves that a body shorter than its Content-Length,
// the client then hanging up (its sending side or the whole connection),
// or stalling, never hangs a request and never becomes a delivered message
// that keeps its quota:
//
//   - When a dimension reads the body, the whole body is read before any
//     decision, so the request ends in 400 within the bound, nothing is
//     counted and the upstream is never contacted.
//   - When no dimension reads the body, it is streamed: the decision is
//     made on the headers, and the body breaks off on its way to the
//     upstream. The admission stays counted, with or without refund_on
//     (5xx, the proxy's failure): the gateway cannot know what the
//     upstream did with what it had (see TestCutBodyStaysCounted).
//   - A client that stalls without hanging up is bounded by the server's
//     read_body timeout (1s here); Caddy has none by default.
func TestHostileTruncated(t *testing.T) {
	const bound = 3 * time.Second
	up := startUpstream(t)
	g := startGatewayWith(t, "timeouts {\n\t\tread_body 1s\n\t}",
		capBlock("/json", "", "dimension recipient {json.to}", ruleBlock("once", "recipient", 1))+
			capBlock("/stream", "", "refund_on 5xx", "dimension recipient {http.request.header.X-To}", ruleBlock("once", "recipient", 1))+
			capBlock("/plain", "", "dimension recipient {http.request.header.X-To}", ruleBlock("once", "recipient", 1))+
			"\treverse_proxy "+up.addr())

	partial := func(path, to string) *rawConn {
		c := dialRaw(t, g)
		c.head(path, "Content-Type: application/json", "Content-Length: 200", "X-To: "+to)
		c.write(fmt.Sprintf(`{"to":%q,"content":"cut off here`, to))
		return c
	}
	whole := func(path, to string) *answer {
		return g.post(path, "application/json", fmt.Sprintf(`{"to":%q}`, to), "X-To: "+to)
	}

	t.Run("body read, client half-closes", func(t *testing.T) {
		c := partial("/json", "half")
		c.CloseWrite()
		expectFailure(t, c.answer(bound), http.StatusBadRequest, "reading request body")
		expectStatus(t, whole("/json", "half"), http.StatusOK)
	})
	t.Run("body read, client closes", func(t *testing.T) {
		c := partial("/json", "gone")
		c.SetLinger(0) // a reset, not a goodbye
		c.Close()
		expectStatus(t, whole("/json", "gone"), http.StatusOK)
	})
	t.Run("body read, client stalls", func(t *testing.T) {
		start := time.Now()
		c := partial("/json", "stall")
		expectFailure(t, c.answer(bound), http.StatusRequestTimeout, "reading request body: timed out")
		if took := time.Since(start); took < 900*time.Millisecond || took > bound {
			t.Errorf("a stalled body ended after %s, want about read_body (1s)", took)
		}
		expectStatus(t, whole("/json", "stall"), http.StatusOK)
	})
	if w, b := up.counts(); w != 3 || b != 0 {
		t.Fatalf("upstream got %d whole and %d broken requests, want the 3 whole ones only", w, b)
	}

	for _, path := range []string{"/stream", "/plain"} {
		t.Run("body streamed to "+path+", client half-closes", func(t *testing.T) {
			c := partial(path, "streamed")
			c.CloseWrite()
			if a := c.answer(bound); a.status < 400 {
				t.Fatalf("a body that broke off was answered %d", a.status)
			}
			// Counted: the one send allowed is spent.
			expectStatus(t, whole(path, "streamed"), http.StatusTooManyRequests)
		})
	}
	if w, _ := up.counts(); w != 3 {
		t.Errorf("upstream got %d whole requests, want 3: a broken-off body must never arrive whole", w)
	}
}

// TestCutBodyStaysCounted proves that a send whose streamed body breaks
// off stays counted, with or without refund_on, because the upstream may
// have acted on what it had: here one that decodes a single JSON value
// and reads no further, as gin's binding (gorush's) does. Each send's
// JSON arrives whole, then the sender hangs up before the Content-Length
// it declared, or a request_body limit cuts its padding: a refund would
// let every such send through a cap of 2.
func TestCutBodyStaysCounted(t *testing.T) {
	var mu sync.Mutex
	delivered := map[string]int{}
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var msg struct{ To string }
		if err := json.NewDecoder(r.Body).Decode(&msg); err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		mu.Lock()
		delivered[r.URL.Path+" "+msg.To]++
		mu.Unlock()
		w.WriteHeader(http.StatusOK)
	}))
	defer up.Close()
	g := startGateway(t, capBlock("/plain", "", "dimension recipient {http.request.header.X-To}", ruleBlock("two", "recipient", 2))+
		capBlock("/refund", "", "refund_on 5xx", "dimension recipient {http.request.header.X-To}", ruleBlock("two", "recipient", 2))+
		"\trequest_body /limited {\n\t\tmax_size 1KB\n\t}\n"+
		capBlock("/limited", "", "refund_on 5xx", "dimension recipient {http.request.header.X-To}", ruleBlock("two", "recipient", 2))+
		"\treverse_proxy "+strings.TrimPrefix(up.URL, "http://"))

	for _, path := range []string{"/plain", "/refund", "/limited"} {
		t.Run(path, func(t *testing.T) {
			msg := `{"to":"dora"}`
			for i := 0; i < 5; i++ {
				c := dialRaw(t, g)
				if path == "/limited" {
					c.head(path, "Content-Type: application/json", "Transfer-Encoding: chunked", "X-To: dora")
					c.chunked(msg+strings.Repeat(" ", 5000), 1000)
					c.answer(3 * time.Second) // the limit's 413, or the cap's 429
					continue
				}
				c.head(path, "Content-Type: application/json", "Content-Length: 200", "X-To: dora")
				c.write(msg)
				// Until the upstream has the message (or the cap said no),
				// then the sender hangs up.
				for deadline := time.Now().Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
					mu.Lock()
					n := delivered[path+" dora"]
					mu.Unlock()
					if n > i || n >= 2 {
						break
					}
				}
				c.SetLinger(0)
				c.Close()
			}
			time.Sleep(100 * time.Millisecond) // the last refunds, were there any
			mu.Lock()
			n := delivered[path+" dora"]
			mu.Unlock()
			if n != 2 {
				t.Errorf("the upstream delivered %d messages to dora, want the cap's 2", n)
			}
			expectStatus(t, g.post(path, "application/json", msg, "X-To: dora"), http.StatusTooManyRequests)
		})
	}
}
