package caddymodule_test

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestUsageShowsExemptSends proves, on both stores, that the admin API
// tells which counted sends were exempt: a rule of 3 an hour, 3 sends and
// then 2 OTPs past it, is "used 5" with "exempt 2", in usage and in
// records alike, and its timeline marks the two OTPs and nothing else.
func TestUsageShowsExemptSends(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startUpstream(t)
		name := "exempt_" + strconv.FormatInt(prefixSeq.Load()+1, 10)
		g := startGateway(t, fmt.Sprintf(`
	frequency_cap {
		name %s
		%s
		key_prefix %s
		exempt {json.priority} otp
		dimension recipient {json.to}
		rule marketing {
			by recipient
			limit 3
			window 1h
		}
	}
	reverse_proxy %s`, name, strictStore(redisLine), testPrefix(), up.addr()))
		for i := 0; i < 3; i++ {
			expectStatus(t, g.send("/", map[string]any{"to": "eve"}), http.StatusOK)
		}
		for i := 0; i < 2; i++ {
			expectStatus(t, g.send("/", map[string]any{"to": "eve", "priority": "otp"}), http.StatusOK)
		}
		check := func(via string, u ruleUsage) {
			t.Helper()
			if u.Used != 5 || u.Limit != 3 || u.Exempt == nil || *u.Exempt != 2 {
				t.Errorf("%s: used %d of %d, exempt %v; want 5 of 3, 2 exempt", via, u.Used, u.Limit, u.Exempt)
			}
			var marks []int64
			for _, s := range u.Sends {
				marks = append(marks, s.Exempt)
			}
			if fmt.Sprint(marks) != "[0 0 0 1 1]" {
				t.Errorf("%s: the timeline's exempt units %v, want the last two sends", via, marks)
			}
		}
		check("usage", usageOf(t, name, "recipient=eve")["marketing"])
		r := recordsOf(t, name, "recipient=eve")
		if len(r.Rules) != 1 {
			t.Fatalf("records: %+v", r)
		}
		check("records", r.Rules[0].ruleUsage)
		// The marks ride with their log: a listing shows no log of them.
		if a := adminDo(t, http.MethodGet, "/frequency_cap/"+name+"/records?recipient=eve"); !strings.Contains(string(a.body), `"unmatched":[]`) {
			t.Errorf("records list the marks as a log: %s", a.body)
		}
		// A recipient with no exempt send says so: exempt 0, no marks.
		expectStatus(t, g.send("/", map[string]any{"to": "max"}), http.StatusOK)
		if u := usageOf(t, name, "recipient=max")["marketing"]; u.Exempt == nil || *u.Exempt != 0 || u.Sends[0].Exempt != 0 {
			t.Errorf("no exempt send: %+v", u)
		}
	})
}

// TestUsageSaysWhenASendGoesPastExemptSends proves that a rule taken past
// its limit by an exempt send says when it admits a send again
// (retry_after: once two sends have left, here the second), not only when
// the next unit frees up (reset_after: the first send), and that the two
// differ by the time between the sends; a rule that admits has none. A
// records listing says the same wait.
func TestUsageSaysWhenASendGoesPastExemptSends(t *testing.T) {
	up := startUpstream(t)
	name := "exempt_" + strconv.FormatInt(prefixSeq.Load()+1, 10)
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap {
		name %s
		key_prefix %s
		exempt {json.priority} otp
		dimension recipient {json.to}
		rule minute {
			by recipient
			limit 2
			window 1m
		}
	}
	reverse_proxy %s`, name, testPrefix(), up.addr()))
	expectStatus(t, g.send("/", map[string]any{"to": "eve"}), http.StatusOK)
	if u := usageOf(t, name, "recipient=eve")["minute"]; u.RetryAfter != nil || u.Used != 1 || u.Remaining != 1 {
		t.Errorf("a rule that admits: used %d, remaining %d, retry_after %v; want 1, 1 and none", u.Used, u.Remaining, u.RetryAfter)
	}
	time.Sleep(2100 * time.Millisecond)
	expectStatus(t, g.send("/", map[string]any{"to": "eve"}), http.StatusOK)
	expectStatus(t, g.send("/", map[string]any{"to": "eve", "priority": "otp"}), http.StatusOK)
	u := usageOf(t, name, "recipient=eve")["minute"]
	if u.Used != 3 || u.Remaining != 0 || u.RetryAfter == nil {
		t.Fatalf("used %d, remaining %d, retry_after %v; want 3, 0 and a wait", u.Used, u.Remaining, u.RetryAfter)
	}
	if d := *u.RetryAfter - u.ResetAfter; d < 1 || d > 3 || *u.RetryAfter > 60 {
		t.Errorf("reset_after %d, retry_after %d: want the second send's departure, about 2 s after the first's", u.ResetAfter, *u.RetryAfter)
	}
	// A listing of everything held about her gives the same wait.
	listed := false
	for _, r := range recordsOf(t, name, "recipient=eve").Rules {
		if r.Rule == "minute" {
			listed = true
			if r.RetryAfter == nil || *r.RetryAfter < *u.RetryAfter-1 || *r.RetryAfter > *u.RetryAfter {
				t.Errorf("records: retry_after %v, usage's %d", r.RetryAfter, *u.RetryAfter)
			}
		}
	}
	if !listed {
		t.Error("records do not list the rule")
	}
	a := g.send("/", map[string]any{"to": "eve"})
	expectStatus(t, a, http.StatusTooManyRequests)
	if got := a.header.Get("Retry-After"); got != strconv.FormatInt(*u.RetryAfter, 10) && got != strconv.FormatInt(*u.RetryAfter-1, 10) {
		t.Errorf("the send's Retry-After %s, the usage's retry_after %d", got, *u.RetryAfter)
	}
}
