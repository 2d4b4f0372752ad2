package caddymodule

import (
	"fmt"
	"math"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// seedSite is the seed config of DESIGN §1 in front of upstream, with
// extra subdirectives.
func seedSite(redisLine, upstream, extra string) string {
	return fmt.Sprintf(`
	frequency_cap /v1/send* {
		%s
		key_prefix %s
		%s
		dimension recipient {json.to}
		dimension content   {json.content}
		rule recipient_minute {
			by     recipient
			limit  15
			window 1m
		}
		rule recipient_day {
			by     recipient
			limit  50
			window 24h
		}
		rule same_content_59s {
			by     recipient content
			limit  2
			window 59s
		}
		rule same_content_59m {
			by     recipient content
			limit  5
			window 59m
		}
	}
	reverse_proxy %s`, redisLine, testPrefix(), extra, upstream)
}

// TestSeedConfig proves the seed caps end to end: 15 sends a minute to one
// recipient pass, the 16th is refused naming recipient_minute; the same
// content a third time within 59 s is refused naming same_content_59s; the
// quota headers carry the exact values, on admitted answers on top of the
// upstream's own, and a denial never reaches the upstream.
func TestSeedConfig(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startUpstream(t)
		g := startGateway(t, seedSite(redisLine, up.addr(), ""))

		first := g.send("/v1/send", map[string]any{"to": "alice", "content": "hello 0"})
		expectStatus(t, first, http.StatusOK)
		if string(first.body) != `{"status":"queued"}` || first.header.Get("X-Upstream") != "push" {
			t.Errorf("admitted answer is not the upstream's: %q %v", first.body, first.header)
		}
		wantHeaders := map[string]string{
			"RateLimit-Policy":      `"recipient_minute";q=15;w=60, "recipient_day";q=50;w=86400, "same_content_59s";q=2;w=59, "same_content_59m";q=5;w=3540`,
			"RateLimit":             `"recipient_minute";r=14;t=60, "recipient_day";r=49;t=86400, "same_content_59s";r=1;t=59, "same_content_59m";r=4;t=3540`,
			"X-RateLimit-Limit":     "2",
			"X-RateLimit-Remaining": "1",
			"X-RateLimit-Reset":     "59",
		}
		for k, v := range wantHeaders {
			if got := first.header.Get(k); got != v {
				t.Errorf("%s: %q, want %q", k, got, v)
			}
		}

		for i := 1; i < 15; i++ {
			a := g.send("/v1/send", map[string]any{"to": "alice", "content": fmt.Sprintf("hello %d", i)})
			expectStatus(t, a, http.StatusOK)
		}
		denied := g.send("/v1/send", map[string]any{"to": "alice", "content": "hello 15"})
		expectStatus(t, denied, http.StatusTooManyRequests)
		if up.count() != 15 {
			t.Errorf("upstream got %d sends, want 15", up.count())
		}
		if ct := denied.header.Get("Content-Type"); ct != "application/problem+json" {
			t.Errorf("Content-Type %q", ct)
		}
		p := denied.json(t)
		retry, _ := strconv.Atoi(denied.header.Get("Retry-After"))
		if p["rule"] != "recipient_minute" || p["limit"] != 15.0 || p["window"] != "1m0s" ||
			p["status"] != 429.0 || p["title"] != "Too Many Requests" || p["type"] != ProblemType {
			t.Errorf("denial body %s", denied.body)
		}
		if retry < 1 || retry > 60 || p["retry_after"] != float64(retry) {
			t.Errorf("Retry-After %q, body retry_after %v", denied.header.Get("Retry-After"), p["retry_after"])
		}
		violated, _ := p["violated"].([]any)
		if len(violated) != 1 || violated[0].(map[string]any)["rule"] != "recipient_minute" ||
			violated[0].(map[string]any)["used"] != 15.0 || violated[0].(map[string]any)["remaining"] != 0.0 {
			t.Errorf("violated %v", p["violated"])
		}
		if rl := denied.header.Get("RateLimit"); !strings.HasPrefix(rl, `"recipient_minute";r=0;t=`) {
			t.Errorf("RateLimit on the denial: %q", rl)
		}
		if denied.header.Get("X-RateLimit-Remaining") != "0" || denied.header.Get("X-RateLimit-Limit") != "15" {
			t.Errorf("X-RateLimit-* on the denial: %v", denied.header)
		}

		for i := 0; i < 2; i++ {
			expectStatus(t, g.send("/v1/send", map[string]any{"to": "bob", "content": "same"}), http.StatusOK)
		}
		third := g.send("/v1/send", map[string]any{"to": "bob", "content": "same"})
		expectStatus(t, third, http.StatusTooManyRequests)
		if rule := third.json(t)["rule"]; rule != "same_content_59s" {
			t.Errorf("third same content denied by %v, want same_content_59s", rule)
		}
		if up.count() != 17 {
			t.Errorf("upstream got %d sends, want 17", up.count())
		}
	})
}

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

	form := "to=carol&text=hi+there%21&to=dave"
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

// TestRejections proves that a missing dimension, a body that is not JSON,
// a body over max_body and a cost that is not a count are answered with a
// JSON reason and never reach the upstream; and that on_missing skip
// leaves out only the rules whose dimension is missing.
func TestRejections(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap /strict {
		key_prefix %s
		max_body   64B
		dimension recipient {json.to}
		dimension channel   {http.request.header.X-Channel}
		dimension amount    {json.amount}
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
		{"empty body", ``, "X-Channel: sms", 400, "request body is not valid JSON", ""},
		{"too large", `{"to":"a","amount":1,"pad":"` + strings.Repeat("x", 64) + `"}`, "X-Channel: sms", 413, "larger than max_body (64 bytes)", ""},
		{"fractional cost", `{"to":"a","amount":1.5}`, "X-Channel: sms", 400, `cost of rule coins is "1.5"`, ""},
		{"negative cost", `{"to":"a","amount":-1}`, "X-Channel: sms", 400, `cost of rule coins is "-1"`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := g.post("/strict", "application/json", tc.body, tc.header)
			expectStatus(t, a, tc.status)
			m := a.json(t)
			if reason, _ := m["error"].(string); !strings.Contains(reason, tc.reason) {
				t.Errorf("error %q, want it to contain %q", reason, tc.reason)
			}
			if dim, _ := m["dimension"].(string); dim != tc.dimension {
				t.Errorf("dimension %q, want %q", dim, tc.dimension)
			}
			if a.header.Get("Content-Type") != "application/json" {
				t.Errorf("Content-Type %q", a.header.Get("Content-Type"))
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
	if up.count() != 2 {
		t.Errorf("upstream got %d, want 2", up.count())
	}
}

// TestStoreDown proves that with Redis unreachable or silent, on_error
// allow passes requests and deny answers 503, both within the timeout
// (plus a margin for the test's own round trip), and that service resumes
// by itself when Redis comes back.
func TestStoreDown(t *testing.T) {
	const timeout = 150 * time.Millisecond
	const bound = timeout + 400*time.Millisecond

	// silent accepts connections and never answers.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()

	for _, down := range []struct{ name, addr string }{
		{"refused", fmt.Sprintf("127.0.0.1:%d", freePort(t))},
		{"silent", silent.Addr().String()},
	} {
		t.Run(down.name, func(t *testing.T) {
			up := startUpstream(t)
			caps := func(onError string) string {
				return fmt.Sprintf(`
				redis {
					address %s
					timeout %s
				}
				key_prefix %s
				on_error %s
				dimension recipient {json.to}
				rule r {
					by     recipient
					limit  5
					window 1m
				}`, down.addr, timeout, testPrefix(), onError)
			}
			g := startGateway(t, fmt.Sprintf(`
	handle /allow {
		frequency_cap {%s
		}
		reverse_proxy %s
	}
	handle /deny {
		frequency_cap {%s
		}
		reverse_proxy %[2]s
	}`, caps("allow"), up.addr(), caps("deny")))

			for i := 0; i < 3; i++ {
				start := time.Now()
				a := g.send("/allow", map[string]any{"to": "alice"})
				took := time.Since(start)
				expectStatus(t, a, http.StatusOK)
				if took > bound {
					t.Errorf("allow took %s, want under %s", took, bound)
				}
				if a.header.Get("RateLimit") != "" {
					t.Errorf("an undecided request carries RateLimit %q", a.header.Get("RateLimit"))
				}

				start = time.Now()
				a = g.send("/deny", map[string]any{"to": "alice"})
				took = time.Since(start)
				expectStatus(t, a, http.StatusServiceUnavailable)
				if took > bound {
					t.Errorf("deny took %s, want under %s", took, bound)
				}
				if reason := a.json(t)["error"]; reason != "frequency cap store unavailable" {
					t.Errorf("503 reason %v", reason)
				}
			}
			if up.count() != 3 {
				t.Errorf("upstream got %d, want the 3 allowed", up.count())
			}
		})
	}

	t.Run("recovers", func(t *testing.T) {
		srv := redistest.Start(t)
		up := startUpstream(t)
		g := startGateway(t, fmt.Sprintf(`
	frequency_cap {
		redis {
			address %s
			timeout %s
		}
		key_prefix %s
		dimension recipient {json.to}
		rule r {
			by     recipient
			limit  5
			window 1m
		}
	}
	reverse_proxy %s`, srv.Addr, timeout, testPrefix(), up.addr()))
		msg := map[string]any{"to": "alice"}
		if a := g.send("/", msg); a.header.Get("X-RateLimit-Remaining") != "4" {
			t.Fatalf("before the outage: remaining %q", a.header.Get("X-RateLimit-Remaining"))
		}
		srv.Stop()
		a := g.send("/", msg)
		expectStatus(t, a, http.StatusOK)
		if a.header.Get("X-RateLimit-Remaining") != "" {
			t.Errorf("during the outage a decision was reported: %v", a.header)
		}
		srv.Restart(t)
		// Redis restarted empty (no persistence): counting starts over.
		deadline := time.Now().Add(5 * time.Second)
		for {
			a = g.send("/", msg)
			if a.header.Get("X-RateLimit-Remaining") == "4" || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if a.header.Get("X-RateLimit-Remaining") != "4" {
			t.Fatalf("after Redis came back: remaining %q", a.header.Get("X-RateLimit-Remaining"))
		}
	})
}

// TestReloadKeepsCounters proves that a config reload with the same store
// keeps the counts (the memory store lives on in the pool), and that a
// changed limit applies at once to the history already recorded.
func TestReloadKeepsCounters(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startUpstream(t)
		site := func(limit int) string {
			return fmt.Sprintf(`
	frequency_cap {
		%s
		key_prefix %s
		dimension recipient {json.to}
		rule r {
			by     recipient
			limit  %d
			window 1h
		}
	}
	reverse_proxy %s`, redisLine, "reload:", limit, up.addr())
		}
		remaining := func(g *gateway) string {
			t.Helper()
			a := g.send("/", map[string]any{"to": t.Name()})
			expectStatus(t, a, http.StatusOK)
			return a.header.Get("X-RateLimit-Remaining")
		}
		g := startGateway(t, site(10))
		for i := 0; i < 3; i++ {
			remaining(g)
		}
		g.reloadSame()
		if r := remaining(g); r != "6" {
			t.Errorf("after reloading the same config: remaining %s, want 6", r)
		}
		g.load(site(20))
		if r := remaining(g); r != "15" {
			t.Errorf("after raising the limit to 20: remaining %s, want 15", r)
		}
	})
}

// TestCalendarDay proves a calendar-day rule refuses until the next local
// midnight of its zone: Retry-After is the seconds to it, in the fixed zone
// of the rule, in the zone a request names, or in the fallback zone when the
// named zone is unknown.
func TestCalendarDay(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startUpstream(t)
		g := startGateway(t, fmt.Sprintf(`
	frequency_cap /fixed {
		%s
		key_prefix %s
		dimension recipient {json.to}
		rule shanghai_day {
			by       recipient
			limit    1
			calendar day Asia/Shanghai
		}
	}
	frequency_cap /local {
		%[1]s
		key_prefix %[2]s
		dimension recipient {json.to}
		rule local_day {
			by       recipient
			limit    1
			calendar day {json.tz} Pacific/Auckland
		}
	}
	reverse_proxy %s`, redisLine, testPrefix(), up.addr()))

		for _, tc := range []struct{ path, to, tz, zone string }{
			{"/fixed", "alice", "", "Asia/Shanghai"},
			{"/local", "bob", "America/New_York", "America/New_York"},
			{"/local", "carol", "Not/A_Zone", "Pacific/Auckland"},
			{"/local", "dave", "", "Pacific/Auckland"},
		} {
			msg := map[string]any{"to": tc.to, "tz": tc.tz}
			expectStatus(t, g.send(tc.path, msg), http.StatusOK)
			a := g.send(tc.path, msg)
			expectStatus(t, a, http.StatusTooManyRequests)
			want := secondsToMidnight(t, tc.zone)
			got, _ := strconv.ParseFloat(a.header.Get("Retry-After"), 64)
			if math.Abs(got-want) > 2 {
				t.Errorf("%s %s: Retry-After %v, want %v (next midnight in %s)", tc.path, tc.to, got, want, tc.zone)
			}
			if w := a.json(t)["window"]; w != "calendar day "+tc.zone {
				t.Errorf("%s %s: window %v, want calendar day %s", tc.path, tc.to, w, tc.zone)
			}
		}
	})
}

func secondsToMidnight(t *testing.T, zone string) float64 {
	loc, err := time.LoadLocation(zone)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().In(loc)
	y, m, d := now.Date()
	next := time.Date(y, m, d+1, 0, 0, 0, 0, loc)
	return math.Ceil(next.Sub(now).Seconds())
}

// TestCostBudget proves a cost rule counts amounts, not requests: with
// 1000 a calendar month, 600 passes, 500 more is refused, 400 fits.
func TestCostBudget(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startUpstream(t)
		g := startGateway(t, fmt.Sprintf(`
	frequency_cap {
		%s
		key_prefix %s
		dimension recipient {json.to}
		rule coins_month {
			by       recipient
			limit    1000
			cost     {json.amount}
			calendar month
		}
	}
	reverse_proxy %s`, redisLine, testPrefix(), up.addr()))

		a := g.send("/", map[string]any{"to": "alice", "amount": 600})
		expectStatus(t, a, http.StatusOK)
		if a.header.Get("X-RateLimit-Remaining") != "400" {
			t.Errorf("after 600: remaining %q", a.header.Get("X-RateLimit-Remaining"))
		}
		a = g.send("/", map[string]any{"to": "alice", "amount": 500})
		expectStatus(t, a, http.StatusTooManyRequests)
		p := a.json(t)
		if p["rule"] != "coins_month" || p["limit"] != 1000.0 || p["window"] != "calendar month UTC" {
			t.Errorf("denial %s", a.body)
		}
		a = g.send("/", map[string]any{"to": "alice", "amount": "400"})
		expectStatus(t, a, http.StatusOK)
		if a.header.Get("X-RateLimit-Remaining") != "0" {
			t.Errorf("after 1000: remaining %q", a.header.Get("X-RateLimit-Remaining"))
		}
		expectStatus(t, g.send("/", map[string]any{"to": "alice", "amount": 0}), http.StatusOK)
		expectStatus(t, g.send("/", map[string]any{"to": "alice", "amount": 1}), http.StatusTooManyRequests)
	})
}

// TestDryRun proves dry_run counts and reports like a live run but never
// blocks, and that the decision placeholders are set for later handlers.
func TestDryRun(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, fmt.Sprintf(`
	header >X-Cap-Rule        "{http.frequency_cap.rule}"
	header >X-Cap-Retry-After "{http.frequency_cap.retry_after}"
	header >X-Cap-Remaining   "{http.frequency_cap.remaining}"
	frequency_cap {
		key_prefix %s
		dry_run
		dimension recipient {json.to}
		rule once {
			by     recipient
			limit  1
			window 1m
		}
	}
	reverse_proxy %s`, testPrefix(), up.addr()))

	msg := map[string]any{"to": "alice"}
	a := g.send("/", msg)
	expectStatus(t, a, http.StatusOK)
	if a.header.Get("X-Cap-Rule") != "" || a.header.Get("X-Cap-Retry-After") != "0" || a.header.Get("X-Cap-Remaining") != "0" {
		t.Errorf("admitted placeholders: %v", a.header)
	}
	a = g.send("/", msg)
	expectStatus(t, a, http.StatusOK)
	if a.header.Get("RateLimit") == "" || !strings.HasPrefix(a.header.Get("RateLimit"), `"once";r=0;t=`) {
		t.Errorf("dry-run RateLimit %q does not tell the truth", a.header.Get("RateLimit"))
	}
	retry, _ := strconv.Atoi(a.header.Get("X-Cap-Retry-After"))
	if a.header.Get("X-Cap-Rule") != "once" || retry < 1 || retry > 60 {
		t.Errorf("would-deny placeholders: rule %q retry_after %q", a.header.Get("X-Cap-Rule"), a.header.Get("X-Cap-Retry-After"))
	}
	if up.count() != 2 {
		t.Errorf("upstream got %d, want 2", up.count())
	}
}
