package caddymodule

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Hostile input through a real in-process Caddy: bodies over, at and
// under max_body, chunked, truncated and stalled bodies, huge header
// values, many dimensions, values full of separators and braces, and JSON
// paths that lead to objects, arrays, null and numbers.

// hsRule is a rule block of a Caddyfile.
func hsRule(name, by string, limit int) string {
	return fmt.Sprintf("rule %s {\n\t\t\tby %s\n\t\t\tlimit %d\n\t\t\twindow 1m\n\t\t}", name, by, limit)
}

// hsRoute is a frequency_cap directive for the paths matching path, with
// its own key_prefix, the store line redisLine ("" for memory), and lines
// of subdirectives.
func hsRoute(path, redisLine string, lines ...string) string {
	return fmt.Sprintf("\tfrequency_cap %s {\n\t\t%s\n\t\tkey_prefix %s\n\t\t%s\n\t}\n",
		path, redisLine, testPrefix(), strings.Join(lines, "\n\t\t"))
}

// hsPadded is a JSON message to `to` of exactly n bytes.
func hsPadded(t *testing.T, to string, n int) string {
	t.Helper()
	s := fmt.Sprintf(`{"to":%q,"pad":""}`, to)
	if len(s) > n {
		t.Fatalf("a message to %q cannot be as short as %d bytes", to, n)
	}
	return s[:len(s)-2] + strings.Repeat("x", n-len(s)) + `"}`
}

// hsConn is a raw connection to the gateway, for requests that net/http
// would not send: chunks of chosen sizes, bodies shorter than their
// Content-Length, bodies that stall.
type hsConn struct {
	t *testing.T
	*net.TCPConn
}

func hsDial(t *testing.T, g *gateway) *hsConn {
	t.Helper()
	c, err := net.Dial("tcp", strings.TrimPrefix(g.url, "http://"))
	if err != nil {
		t.Fatalf("dialing the gateway: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return &hsConn{t: t, TCPConn: c.(*net.TCPConn)}
}

// head writes a request line and headers ("Name: value" each).
func (c *hsConn) head(path string, headers ...string) {
	c.t.Helper()
	c.write(fmt.Sprintf("POST %s HTTP/1.1\r\nHost: gateway\r\n%s\r\n", path, strings.Join(append(headers, ""), "\r\n")))
}

func (c *hsConn) write(s string) {
	c.t.Helper()
	if _, err := io.WriteString(c, s); err != nil {
		c.t.Fatalf("writing to the gateway: %v", err)
	}
}

// chunked writes body in chunks of the given sizes (the last size repeats),
// then the last chunk.
func (c *hsConn) chunked(body string, sizes ...int) {
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
func (c *hsConn) answer(bound time.Duration) *answer {
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

// hsExpectError fails the test unless a is a JSON failure of the status
// whose reason contains reason.
func hsExpectError(t *testing.T, a *answer, status int, reason string) {
	t.Helper()
	expectStatus(t, a, status)
	if ct := a.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	if got, _ := a.json(t)["error"].(string); !strings.Contains(got, reason) {
		t.Errorf("error %q, want it to contain %q", got, reason)
	}
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
	reverse_proxy %s`, testPrefix(), hsRule("many", "recipient", 100), up.addr()))

	exact := hsPadded(t, "alice", maxBody)
	a := g.post("/v1/send", "application/json", exact)
	expectStatus(t, a, http.StatusOK)
	if got := up.last(); string(got.body) != exact || got.contentLength != maxBody {
		t.Errorf("upstream got %d bytes (Content-Length %d), want the %d sent", len(got.body), got.contentLength, maxBody)
	}
	over := hsPadded(t, "alice", maxBody+1)
	hsExpectError(t, g.post("/v1/send", "application/json", over), http.StatusRequestEntityTooLarge, "larger than max_body (1024 bytes)")

	c := hsDial(t, g)
	c.head("/v1/send", "Content-Type: application/json", "Transfer-Encoding: chunked")
	c.chunked(exact, 1, 100, 7)
	a = c.answer(5 * time.Second)
	expectStatus(t, a, http.StatusOK)
	if got := up.last(); string(got.body) != exact {
		t.Errorf("upstream got %d bytes of a chunked body, want the %d sent", len(got.body), maxBody)
	}
	c = hsDial(t, g)
	c.head("/v1/send", "Content-Type: application/json", "Transfer-Encoding: chunked")
	c.chunked(over, 1000, 1)
	hsExpectError(t, c.answer(5*time.Second), http.StatusRequestEntityTooLarge, "larger than max_body")

	// 1 GiB announced, nothing sent: the answer cannot wait for the body.
	c = hsDial(t, g)
	c.head("/v1/send", "Content-Type: application/json", "Content-Length: 1073741824")
	hsExpectError(t, c.answer(2*time.Second), http.StatusRequestEntityTooLarge, "larger than max_body")

	// A chunked stream that never ends is cut off after max_body+1 bytes.
	c = hsDial(t, g)
	c.head("/v1/send", "Content-Type: application/json", "Transfer-Encoding: chunked")
	go func() {
		chunk := fmt.Sprintf("%x\r\n%s\r\n", 4096, strings.Repeat(" ", 4096))
		for i := 0; i < 1024; i++ {
			if _, err := io.WriteString(c, chunk); err != nil {
				return // the gateway has answered and hung up
			}
		}
	}()
	hsExpectError(t, c.answer(5*time.Second), http.StatusRequestEntityTooLarge, "larger than max_body")

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
	reverse_proxy %s`, testPrefix(), hsRule("once", "recipient", 1), testPrefix(), hsRule("once", "recipient", 1), up.addr()))

	send := func(path, contentType, body string, sizes ...int) *answer {
		c := hsDial(t, g)
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

// hsStrictUpstream records which requests arrived whole and which broke
// off before their body ended.
type hsStrictUpstream struct {
	*httptest.Server
	mu            sync.Mutex
	whole, broken int
}

func hsStartStrictUpstream(t *testing.T) *hsStrictUpstream {
	u := &hsStrictUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, err := io.ReadAll(r.Body)
		u.mu.Lock()
		if err != nil {
			u.broken++
		} else {
			u.whole++
		}
		u.mu.Unlock()
		if err != nil {
			// A message that broke off is no message.
			http.Error(w, "incomplete", http.StatusBadRequest)
			return
		}
		io.WriteString(w, `{"status":"queued"}`)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *hsStrictUpstream) counts() (whole, broken int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.whole, u.broken
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
//     upstream, which sees an incomplete request, not a message (it may
//     answer it, here with 400, or the proxy fails). Either way the
//     admission is refunded, with or without refund_on: no message was
//     delivered.
//   - A client that stalls without hanging up is bounded by the server's
//     read_body timeout (1s here); Caddy has none by default.
func TestHostileTruncated(t *testing.T) {
	const bound = 3 * time.Second
	up := hsStartStrictUpstream(t)
	g := startGatewayWith(t, "timeouts {\n\t\tread_body 1s\n\t}",
		hsRoute("/json", "", "dimension recipient {json.to}", hsRule("once", "recipient", 1))+
			hsRoute("/stream", "", "refund_on 5xx", "dimension recipient {http.request.header.X-To}", hsRule("once", "recipient", 1))+
			hsRoute("/plain", "", "dimension recipient {http.request.header.X-To}", hsRule("once", "recipient", 1))+
			"\treverse_proxy "+up.Listener.Addr().String())

	partial := func(path, to string) *hsConn {
		c := hsDial(t, g)
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
		hsExpectError(t, c.answer(bound), http.StatusBadRequest, "reading request body")
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
		hsExpectError(t, c.answer(bound), http.StatusBadRequest, "reading request body")
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
			// Refunded: the one send allowed is still there.
			expectStatus(t, whole(path, "streamed"), http.StatusOK)
			expectStatus(t, whole(path, "streamed"), http.StatusTooManyRequests)
		})
	}
	if w, _ := up.counts(); w != 5 {
		t.Errorf("upstream got %d whole requests, want 5: a broken-off body must never arrive whole", w)
	}
}

// TestHostileHeaderValues proves a dimension from a 60 KB header works
// (the value is hashed into the key, and never echoed back; Caddy itself
// refuses request headers over 16 KiB with 431 unless the server's
// max_header_size is raised, as here), that values
// differing in one byte at either end are counted apart, and that no
// value can pass for the hash of another.
func TestHostileHeaderValues(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startUpstream(t)
		g := startGatewayWith(t, "max_header_size 128KiB",
			hsRoute("", redisLine, "dimension recipient {http.request.header.X-To}", hsRule("once", "recipient", 1))+
				"\treverse_proxy "+up.addr())

		send := func(to string) *answer { return g.post("/v1/send", "text/plain", "hi", "X-To: "+to) }
		huge := strings.Repeat("a", 60<<10)
		expectStatus(t, send(huge), http.StatusOK)
		denied := send(huge)
		expectStatus(t, denied, http.StatusTooManyRequests)
		if len(denied.body) > 2000 || strings.Contains(fmt.Sprint(denied.header), "aaaaaaaa") {
			t.Errorf("the denial echoes the value: %d body bytes, header %v", len(denied.body), denied.header)
		}
		expectStatus(t, send(huge[:len(huge)-1]+"b"), http.StatusOK)
		expectStatus(t, send("b"+huge[1:]), http.StatusOK)

		long := strings.Repeat("z", 65)
		sum := sha256.Sum256([]byte(long))
		for _, v := range []string{long, "#" + hex.EncodeToString(sum[:16]), strings.Repeat("z", 64)} {
			expectStatus(t, send(v), http.StatusOK)
		}
		expectStatus(t, send(long), http.StatusTooManyRequests)
	})
}

// TestHostileManyDimensions proves 50 dimensions and 100 rules work in one
// decision: rules over up to 50 dimensions, and 50 rules each with a
// different first dimension.
func TestHostileManyDimensions(t *testing.T) {
	const n = 50
	var dims, chain, solo strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&dims, "dimension d%d {http.request.header.X-D%d}\n\t\t", i, i)
		by := make([]string, i+1)
		for j := range by {
			by[j] = "d" + strconv.Itoa(j)
		}
		fmt.Fprintf(&chain, "%s\n\t\t", hsRule(fmt.Sprintf("chain%d", i), strings.Join(by, " "), 2))
		fmt.Fprintf(&solo, "%s\n\t\t", hsRule(fmt.Sprintf("solo%d", i), fmt.Sprintf("d%d", i), 2))
	}
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startUpstream(t)
		g := startGateway(t, hsRoute("/chain", redisLine, dims.String(), chain.String())+
			hsRoute("/solo", redisLine, dims.String(), solo.String())+
			"\treverse_proxy "+up.addr())

		send := func(path string, change int, value string) *answer {
			headers := make([]string, n)
			for i := range headers {
				v := "v" + strconv.Itoa(i)
				if i == change {
					v = value
				}
				headers[i] = fmt.Sprintf("X-D%d: %s", i, v)
			}
			return g.post(path, "text/plain", "hi", headers...)
		}
		violated := func(a *answer) int {
			v, _ := a.json(t)["violated"].([]any)
			return len(v)
		}
		for _, path := range []string{"/chain", "/solo"} {
			for i := 0; i < 2; i++ {
				a := send(path, -1, "")
				expectStatus(t, a, http.StatusOK)
				if got := strings.Count(a.header.Get("RateLimit-Policy"), ";q=2;"); got != n {
					t.Fatalf("%s: RateLimit-Policy names %d rules, want %d", path, got, n)
				}
			}
			a := send(path, -1, "")
			expectStatus(t, a, http.StatusTooManyRequests)
			if v := violated(a); v != n {
				t.Errorf("%s: %d rules violated, want %d", path, v, n)
			}
			// Another last value frees the rules that count it: chain49
			// and solo49.
			a = send(path, n-1, "other")
			expectStatus(t, a, http.StatusTooManyRequests)
			if v := violated(a); v != n-1 {
				t.Errorf("%s with another d49: %d rules violated, want %d", path, v, n-1)
			}
		}
		// Another first value frees every chain rule.
		expectStatus(t, send("/chain", 0, "other"), http.StatusOK)
		if got := up.count(); got != 5 {
			t.Errorf("upstream got %d, want 5", got)
		}
	})
}

// hsTrickyValues differ from one another only in separators, braces,
// escapes, placeholders, Unicode forms and control characters; each must
// count on its own.
var hsTrickyValues = []string{
	"a", "{a}", "}{", "{", "}", "{}", "a&b=c", "a&b", "a=b", "a$b", "$", "a.b", "a b", "a+b", "a%20b",
	"%7D", "%7d", "%", "%25", "%2525", "#x", "%23x", "#", "a\x00b", "a\x00", "\x00", "a\tb", "a\nb",
	"\\", "\"", "é", "e\u0301", "张三", "👋", "\ufffd", "{json.to}", "{http.request.host}", "{env.HOME}",
	"x{y}z", "fc:recipient{a}", "recipient=a", "a&recipient=b", "=", "&",
}

// hsTrickyPairs are two-dimension tuples whose values, joined with any
// separator, would read alike.
var hsTrickyPairs = [][2]string{
	{"1&b=2", "3"}, {"1", "2&b=3"}, {"1=", "2"}, {"1", "=2"}, {"x$", "y"}, {"x", "$y"},
	{"}{", "a"}, {"}", "{a"}, {"%26", "b"}, {"&", "b"},
}

// TestHostileSeparators proves that distinct values never share a count,
// whether a value is a rule's first dimension (the key's hash tag) or a
// later one (the sub-log), and whether it comes from JSON (NUL by \u0000),
// a form or a header; and that a value that looks like a placeholder is
// a value, never resolved again.
func TestHostileSeparators(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startUpstream(t)
		once := hsRule("once", "to", 1)
		g := startGateway(t, hsRoute("/first", redisLine, "dimension to {json.to}", once)+
			hsRoute("/second", redisLine, "dimension fixed {http.request.header.X-Fixed}", "dimension to {json.to}", hsRule("once", "fixed to", 1))+
			hsRoute("/pair", redisLine, "dimension fixed {http.request.header.X-Fixed}", "dimension a {json.a}", "dimension b {json.b}", hsRule("once", "fixed a b", 1))+
			hsRoute("/form", redisLine, "dimension to {form.to}", once)+
			hsRoute("/header", redisLine, "dimension to {http.request.header.X-To}", once)+
			"\treverse_proxy "+up.addr())

		jsonOf := func(kv ...string) string {
			m := map[string]string{}
			for i := 0; i < len(kv); i += 2 {
				m[kv[i]] = kv[i+1]
			}
			b, err := json.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			return string(b)
		}
		host := strings.TrimPrefix(g.url, "http://")
		headerValues := []string{"{http.request.host}", host, "127.0.0.1", "}{", "{a}", "a&b=c", "%7D", "#x", "é", "e\u0301"}
		type sender struct {
			name   string
			values []string
			send   func(v string) *answer
		}
		senders := []sender{
			{"json first", hsTrickyValues, func(v string) *answer {
				return g.post("/first", "application/json", jsonOf("to", v))
			}},
			{"json second", hsTrickyValues, func(v string) *answer {
				return g.post("/second", "application/json", jsonOf("to", v), "X-Fixed: f")
			}},
			{"form", hsTrickyValues, func(v string) *answer {
				return g.post("/form", "application/x-www-form-urlencoded", url.Values{"to": {v}}.Encode())
			}},
			{"header", headerValues, func(v string) *answer {
				return g.post("/header", "text/plain", "hi", "X-To: "+v)
			}},
		}
		for _, s := range senders {
			for _, v := range s.values {
				if a := s.send(v); a.status != http.StatusOK {
					t.Errorf("%s: first send of %q: status %d %s (counted with another value?)", s.name, v, a.status, a.body)
				}
			}
			for _, v := range s.values {
				if a := s.send(v); a.status != http.StatusTooManyRequests {
					t.Errorf("%s: second send of %q: status %d, want 429", s.name, v, a.status)
				}
			}
		}
		for _, p := range hsTrickyPairs {
			if a := g.post("/pair", "application/json", jsonOf("a", p[0], "b", p[1]), "X-Fixed: f"); a.status != http.StatusOK {
				t.Errorf("pair %q: status %d (counted with another pair?)", p, a.status)
			}
		}
		for _, p := range hsTrickyPairs {
			if a := g.post("/pair", "application/json", jsonOf("a", p[0], "b", p[1]), "X-Fixed: f"); a.status != http.StatusTooManyRequests {
				t.Errorf("pair %q again: status %d, want 429", p, a.status)
			}
		}
		if want := 2*len(hsTrickyValues) + len(headerValues) + len(hsTrickyPairs) + len(hsTrickyValues); up.count() != want {
			t.Errorf("upstream got %d, want %d", up.count(), want)
		}
	})
}

// TestHostileJSONShapes proves what {json.to} makes of what the path
// reaches: an object or array counts as its compact JSON (its members in
// name order, so the same object written in another order is the same
// value), a number exactly as sent (1.50 and 1.5 are two values), true
// and false as text; null is missing (400). A string and a number or
// object of the same text count together: they name the same recipient to
// any reader that turns values into text, and sharing a count can only
// refuse early, never admit too much. A body that names a member twice or
// is not UTF-8 is refused, because readers differ on what it says.
func TestHostileJSONShapes(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap {
		key_prefix %s
		dimension  recipient {json.to}
		%s
	}
	reverse_proxy %s`, testPrefix(), hsRule("once", "recipient", 1), up.addr()))

	for _, tc := range []struct {
		body   string
		status int
	}{
		{`{"to":{"id":1,"via":"sms"}}`, 200},
		{`{"to":{"via":"sms","id":1}}`, 429},
		{`{"to":{"id":1.0,"via":"sms"}}`, 200},
		{`{"to":["a","b"]}`, 200},
		{`{"to":["b","a"]}`, 200},
		{`{"to":[]}`, 200},
		{`{"to":{}}`, 200},
		{`{"to":1.50}`, 200},
		{`{"to":1.5}`, 200},
		{`{"to":15e-1}`, 200},
		{`{"to":1.50}`, 429},
		{`{"to":"1.50"}`, 429},
		{`{"to":12345678901234567890123}`, 200},
		{`{"to":12345678901234567890124}`, 200},
		{`{"to":true}`, 200},
		{`{"to":"true"}`, 429},
		{`{"to":false}`, 200},
		{`{"to":"{\"id\":1,\"via\":\"sms\"}"}`, 429},
		{`{"to":null}`, 400},
		{`{"to":"alice","to":"mallory"}`, 400},
		{`{"to":"alice","\u0074o":"mallory"}`, 400},
		{`{"to":"alice","meta":{"k":1,"k":1}}`, 400},
		{"{\"to\":\"al\xffice\"}", 400},
		{`{"to":"alice"}`, 200},
	} {
		a := g.post("/v1/send", "application/json", tc.body)
		if a.status != tc.status {
			t.Errorf("%s: status %d, want %d; %s", tc.body, a.status, tc.status, a.body)
		}
	}
	if got := up.count(); got != 14 {
		t.Errorf("upstream got %d, want 14", got)
	}
}
