package caddymodule_test

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// exampleTests prove each examples/<dir>/Caddyfile does what its README
// section says. Every example must have one.
var exampleTests = map[string]func(t *testing.T, path string){
	"push-gateway":       testPushGateway,
	"content-dedup":      testContentDedup,
	"coin-budget":        testCoinBudget,
	"recipient-timezone": testRecipientTimezone,
	"sms-gateway":        testSMSGateway,
	"expo-push":          testExpoPush,
	"gorush-gateway":     testGorushGateway,
	"sendgrid-mail":      testSendgridMail,
	"apns-gateway":       testAPNsGateway,
	"fcm-gateway":        testFCMGateway,
}

// TestExamples proves every example is formatted as caddy fmt would,
// adapts without warnings as shipped, has a section in examples/README.md,
// and, run in a real Caddy with only its ports (and Redis) changed,
// enforces the caps it describes.
func TestExamples(t *testing.T) {
	files, err := filepath.Glob("../examples/*/Caddyfile")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples/*/Caddyfile: %v", err)
	}
	readme, err := os.ReadFile("../examples/README.md")
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, file := range files {
		dir := filepath.Base(filepath.Dir(file))
		seen[dir] = true
		t.Run(dir, func(t *testing.T) {
			test, ok := exampleTests[dir]
			if !ok {
				t.Fatalf("examples/%s has no test: add it to exampleTests", dir)
			}
			if !bytes.Contains(readme, []byte("\n## "+dir+"\n")) {
				t.Errorf("examples/README.md has no section ## %s", dir)
			}
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if formatted := caddyfile.Format(data); !bytes.Equal(formatted, data) {
				t.Errorf("%s is not formatted: run caddy fmt --overwrite %[1]s", file)
			}
			_, warnings, err := caddyconfig.GetAdapter("caddyfile").Adapt(data, map[string]any{"filename": file})
			if err != nil || len(warnings) > 0 {
				t.Fatalf("adapting %s: %v %v", file, err, warnings)
			}
			test(t, file)
		})
	}
	for dir := range exampleTests {
		if !seen[dir] {
			t.Errorf("a test exists for examples/%s, which has no Caddyfile", dir)
		}
	}
}

// startExample runs an example in the test Caddy: its global options are
// replaced by the tests' own (the example may set only default_bind
// there), the gateway's :8080 moves to a free port, its upstream
// 127.0.0.1:9000 becomes up, and the mock upstream site moves off :9000.
func startExample(t *testing.T, path string, up interface{ addr() string }) *gateway {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(data), "\n")
	var site []string
	inGlobals := false
	for _, line := range lines {
		trimmed := strings.TrimSpace(line)
		switch {
		case line == "{" && site == nil:
			inGlobals = true
		case inGlobals && line == "}":
			inGlobals = false
			site = []string{}
		case inGlobals && trimmed != "" && !strings.HasPrefix(trimmed, "#") && trimmed != "default_bind 127.0.0.1":
			t.Fatalf("%s sets global option %q, which the test does not know how to keep", path, trimmed)
		case !inGlobals && site != nil:
			site = append(site, line)
		}
	}
	if site == nil {
		t.Fatalf("%s has no global options block", path)
	}
	g := newGateway(t, "")
	cfg := strings.Join(site, "\n")
	for _, r := range []struct{ old, new string }{
		{"\n:8080 {", fmt.Sprintf("\n:%d {", g.port)},
		{"reverse_proxy 127.0.0.1:9000", "reverse_proxy " + up.addr()},
		{"\nhttp://:9000 {", fmt.Sprintf("\nhttp://:%d {", freePort(t))},
	} {
		if r.old == "\nhttp://:9000 {" && !strings.Contains(cfg, r.old) {
			continue // the mock is a program of its own (expo-push)
		}
		if strings.Count(cfg, r.old) != 1 {
			t.Fatalf("%s: expected %q once", path, strings.TrimSpace(r.old))
		}
		cfg = strings.Replace(cfg, r.old, r.new, 1)
	}
	g.loadSites(cfg)
	return g
}

// unique names a recipient no other test or earlier run has used: the
// examples keep the default key_prefix, so their counts share a store.
func unique(name string) string { return fmt.Sprintf("%s-%d", name, time.Now().UnixNano()) }

// expectRetryAfter checks a denial's rule and window, and that its
// Retry-After is want seconds, give or take a second or two.
func expectRetryAfter(t *testing.T, a *answer, rule, window string, want float64) {
	t.Helper()
	expectStatus(t, a, http.StatusTooManyRequests)
	p := a.problem(t)
	if p.Rule != rule || p.Window != window {
		t.Errorf("denied by %s over %s, want %s over %s", p.Rule, p.Window, rule, window)
	}
	got, _ := strconv.ParseFloat(a.header.Get("Retry-After"), 64)
	if math.Abs(got-want) > 2 {
		t.Errorf("%s: Retry-After %v, want %v", rule, got, want)
	}
}

// testPushGateway: the seed-002 caps on Redis. 15 sends a minute pass and
// the 16th is refused; the same content passes twice and is refused the
// third time; the four rules are announced in RateLimit-Policy (the day
// and 59-minute caps cannot be reached within the per-minute caps in a
// test's time; the limiter's tests prove those windows); a send the
// provider fails is refunded; the counts are in Redis and the admin API
// reads them.
func testPushGateway(t *testing.T, path string) {
	url := redistest.URL(t)
	t.Setenv("REDIS_URL", url)
	up := startUpstream(t)
	g := startExample(t, path, up)
	alice, bob := unique("alice"), unique("bob")
	send := func(to, content string, headers ...string) *answer {
		return g.send("/v1/send", map[string]any{"to": to, "content": content}, headers...)
	}

	for i := 0; i < 15; i++ {
		a := send(alice, fmt.Sprintf("hello %d", i))
		expectStatus(t, a, http.StatusOK)
		if i == 0 && a.header.Get("RateLimit-Policy") != `"recipient_minute";q=15;w=60, "recipient_day";q=50;w=86400, "same_content_59s";q=2;w=59, "same_content_59m";q=5;w=3540` {
			t.Errorf("RateLimit-Policy %q", a.header.Get("RateLimit-Policy"))
		}
	}
	expectRetryAfter(t, send(alice, "hello 15"), "recipient_minute", "1m0s", 60)

	expectStatus(t, send(bob, "news"), http.StatusOK)
	expectStatus(t, send(bob, "news"), http.StatusOK)
	expectRetryAfter(t, send(bob, "news"), "same_content_59s", "59s", 59)

	failed := send(bob, "other", "X-Want-Status: 502")
	expectStatus(t, failed, http.StatusBadGateway)
	a := send(bob, "third")
	expectStatus(t, a, http.StatusOK)
	if r := a.header.Get("RateLimit"); !strings.HasPrefix(r, `"recipient_minute";r=12;`) {
		t.Errorf("after a refunded send: RateLimit %q, want recipient_minute r=12", r)
	}
	if up.count() != 15+2+2 {
		t.Errorf("the provider got %d sends, want 19", up.count())
	}

	u := usageOf(t, "push", "recipient="+alice)
	expectUsage(t, u, map[string][2]int64{"recipient_minute": {15, 0}, "recipient_day": {15, 35}})

	opt, err := redis.ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	defer rdb.Close()
	keys, err := rdb.Keys(context.Background(), "freqcap:*"+alice+"*").Result()
	if err != nil || len(keys) == 0 {
		t.Errorf("no key of %s in Redis: %v %v", alice, keys, err)
	}
}

// testContentDedup: the same content reaches a recipient once in 300 s
// (long contents too: they are hashed); five different messages a
// Beijing day per channel, the sixth refused until Beijing midnight; the
// next channel has its own five; a send without a channel is refused.
func testContentDedup(t *testing.T, path string) {
	up := startUpstream(t)
	g := startExample(t, path, up)
	alice := unique("alice")
	send := func(content, channel string) *answer {
		return g.send("/v1/send", map[string]any{"to": alice, "content": content}, "X-Channel: "+channel)
	}

	expectStatus(t, send("hello", "sms"), http.StatusOK)
	expectRetryAfter(t, send("hello", "sms"), "same_content_5m", "5m0s", 300)
	long := strings.Repeat("a long message body ", 100)
	expectStatus(t, send(long, "sms"), http.StatusOK)
	expectRetryAfter(t, send(long, "sms"), "same_content_5m", "5m0s", 300)
	for i := 0; i < 3; i++ {
		expectStatus(t, send(fmt.Sprintf("news %d", i), "sms"), http.StatusOK)
	}
	expectRetryAfter(t, send("news 3", "sms"), "channel_day", "calendar day Asia/Shanghai", secondsToMidnight(t, "Asia/Shanghai"))
	expectStatus(t, send("news 3", "email"), http.StatusOK)

	a := g.send("/v1/send", map[string]any{"to": alice, "content": "no channel"})
	expectStatus(t, a, http.StatusBadRequest)
	if a.failure(t).Dimension != "channel" {
		t.Errorf("without X-Channel: %s", a.body)
	}
	if up.count() != 6 {
		t.Errorf("the provider got %d sends, want 6", up.count())
	}
}

// testCoinBudget: grants count their amount against 1000 coins a Beijing
// month; one that does not fit is refused until the next month; a grant
// the coin service fails is given back; an amount that is not a count is
// refused.
func testCoinBudget(t *testing.T, path string) {
	up := startUpstream(t)
	g := startExample(t, path, up)
	user := unique("user")
	grant := func(amount any, headers ...string) *answer {
		return g.send("/v1/grant", map[string]any{"user": user, "amount": amount}, headers...)
	}

	a := grant(600)
	expectStatus(t, a, http.StatusOK)
	if a.header.Get("X-RateLimit-Remaining") != "400" {
		t.Errorf("after 600: remaining %q", a.header.Get("X-RateLimit-Remaining"))
	}
	expectRetryAfter(t, grant(500), "coins_month", "calendar month Asia/Shanghai", secondsToNextMonth(t, "Asia/Shanghai"))
	expectStatus(t, grant(300, "X-Want-Status: 503"), http.StatusServiceUnavailable)
	a = grant(400)
	expectStatus(t, a, http.StatusOK)
	if a.header.Get("X-RateLimit-Remaining") != "0" {
		t.Errorf("after 1000: remaining %q", a.header.Get("X-RateLimit-Remaining"))
	}
	expectStatus(t, grant(1), http.StatusTooManyRequests)
	if f := expectFailure(t, grant("ten"), http.StatusBadRequest, ""); f.Rule != "coins_month" {
		t.Errorf("amount \"ten\": refused naming rule %q, want coins_month", f.Rule)
	}
	if up.count() != 3 {
		t.Errorf("the coin service got %d grants, want 3", up.count())
	}
}

// testRecipientTimezone: three sends a day, where the day is the one of
// the zone the message names: the fourth is refused until that zone's
// midnight; an unknown or missing zone counts in Beijing time; the admin
// API reads a recipient's day in the zone it is asked for.
func testRecipientTimezone(t *testing.T, path string) {
	up := startUpstream(t)
	g := startExample(t, path, up)
	for _, tc := range []struct{ tz, zone string }{
		{"America/New_York", "America/New_York"},
		{"Asia/Kolkata", "Asia/Kolkata"},
		{"Mars/Olympus_Mons", "Asia/Shanghai"},
		{"", "Asia/Shanghai"},
	} {
		to := unique("r")
		msg := map[string]any{"to": to}
		if tc.tz != "" {
			msg["tz"] = tc.tz
		}
		for i := 0; i < 3; i++ {
			expectStatus(t, g.send("/v1/send", msg), http.StatusOK)
		}
		expectRetryAfter(t, g.send("/v1/send", msg), "recipient_local_day", "calendar day "+tc.zone, secondsToMidnight(t, tc.zone))
		u := usageOf(t, "local_day", "recipient="+to+"&zone="+tc.zone)["recipient_local_day"]
		if u.Used != 3 || u.Remaining != 0 || u.Window != "calendar day "+tc.zone {
			t.Errorf("%s: usage %+v", tc.zone, u)
		}
	}
}

// testSMSGateway: quiet hours in the recipient's zone, OTPs exempt and
// counted, tiers from X-Tier through map. The zones are chosen at run time,
// among whole-hour offsets, so that one is in its quiet hours and one not.
func testSMSGateway(t *testing.T, path string) {
	t.Setenv("REDIS_URL", redistest.URL(t))
	up := startUpstream(t)
	g := startExample(t, path, up)
	var quietZone, dayZone string
	for off := -12; off <= 12; off++ {
		zone := fmt.Sprintf("Etc/GMT%+d", -off) // Etc signs are inverted
		if off == 0 {
			zone = "UTC"
		}
		z, err := time.LoadLocation(zone)
		if err != nil {
			t.Fatal(err)
		}
		local := time.Now().In(z)
		// Keep clear of the edges, so that a slow run stays in the range.
		switch h := local.Hour(); {
		case (h >= 22 || h < 7) && quietZone == "":
			quietZone = zone
		case h >= 9 && h < 20 && dayZone == "":
			dayZone = zone
		}
	}
	who := unique("+1555")
	a := g.send("/v1/sms", map[string]any{"to": who, "tz": quietZone})
	expectStatus(t, a, http.StatusTooManyRequests)
	if p := a.problem(t); p.Rule != "quiet_hours" {
		t.Errorf("quiet denial names %q", p.Rule)
	}
	// An OTP gets through the quiet hours, and counts: the default tier's
	// 3 a day leave 2 for the daytime sends.
	expectStatus(t, g.send("/v1/sms", map[string]any{"to": who, "tz": quietZone, "priority": "otp"}), http.StatusOK)
	for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
		if a := g.send("/v1/sms", map[string]any{"to": who, "tz": dayZone}); a.status != want {
			t.Fatalf("daytime send %d: %d, want %d", i, a.status, want)
		}
	}
	gold := unique("+1555")
	for i := 0; i < 20; i++ {
		expectStatus(t, g.send("/v1/sms", map[string]any{"to": gold, "tz": dayZone}, "X-Tier: gold"), http.StatusOK)
	}
	expectStatus(t, g.send("/v1/sms", map[string]any{"to": gold, "tz": dayZone}, "X-Tier: gold"), http.StatusTooManyRequests)
}
