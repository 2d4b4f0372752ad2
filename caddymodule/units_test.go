package caddymodule

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// TestLookupJSON proves the {json.<path>} placeholder: dotted paths, array
// indices, numbers exactly as sent, and what counts as missing.
func TestLookupJSON(t *testing.T) {
	doc, err := parseJSON([]byte(`{"to":"alice","n":1.50,"big":12345678901234567890,"ok":true,"none":null,
		"message":{"to":["bob","carol"],"meta":{"a":1}},"list":[{"id":7}],"esc":"caf\u00e9"}`))
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path  string
		want  string
		found bool
	}{
		{"to", "alice", true},
		{"n", "1.50", true},
		{"big", "12345678901234567890", true},
		{"ok", "true", true},
		{"none", "", false},
		{"message.to.0", "bob", true},
		{"message.to.1", "carol", true},
		{"message.to.2", "", false},
		{"message.to.-1", "", false},
		{"message.to.x", "", false},
		{"message.meta", `{"a":1}`, true},
		{"list.0.id", "7", true},
		{"to.0", "", false},
		{"absent", "", false},
		{"esc", "café", true},
		{"", "", false},
	} {
		v, ok := lookupJSON(doc, tc.path)
		got, _ := v.(string)
		if ok != tc.found || got != tc.want {
			t.Errorf("json.%s = %q, %v; want %q, %v", tc.path, got, ok, tc.want, tc.found)
		}
	}
}

// TestReadBody proves the body is read once, bounded, and handed on
// unchanged.
func TestReadBody(t *testing.T) {
	const body = `{"to":"alice"}`
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
	b, fail := readBody(r, needJSON, 1<<20)
	if fail != nil {
		t.Fatal(fail.Reason)
	}
	if v, _ := b.provide("json.to"); v != "alice" {
		t.Errorf("json.to = %v", v)
	}
	rest := make([]byte, 64)
	n, _ := r.Body.Read(rest)
	if string(rest[:n]) != body {
		t.Errorf("next handler reads %q", rest[:n])
	}

	r = httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
	r.ContentLength = -1 // chunked: the length is only learned by reading
	if _, fail := readBody(r, needJSON, 8); fail == nil || fail.Status != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over max_body gave %+v", fail)
	}
}

// TestStatusMatch proves refund_on's classes and codes.
func TestStatusMatch(t *testing.T) {
	var ms []statusMatch
	for _, s := range []string{"5xx", "429", "4XX"} {
		m, err := parseStatusMatch(s)
		if err != nil {
			t.Fatal(err)
		}
		ms = append(ms, m)
	}
	for status, want := range map[int]bool{500: true, 503: true, 429: true, 404: true, 200: false, 302: false} {
		if matchesAny(ms, status) != want {
			t.Errorf("%d: matched %v", status, !want)
		}
	}
	for _, bad := range []string{"6xx", "0xx", "99", "600", "5x", "abc", ""} {
		if _, err := parseStatusMatch(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// TestStatusRecorder proves the wrapper records the final status, lets
// informational answers and flushes through, and can be unwrapped.
func TestStatusRecorder(t *testing.T) {
	w := httptest.NewRecorder()
	rec := newStatusRecorder(w, nil)
	rec.WriteHeader(http.StatusEarlyHints)
	rec.Flush()
	if rec.status != http.StatusOK || !w.Flushed {
		t.Errorf("after a 103 and a flush: status %d, flushed %v", rec.status, w.Flushed)
	}

	w = httptest.NewRecorder()
	rec = newStatusRecorder(w, nil)
	rec.WriteHeader(http.StatusBadGateway)
	rec.Write([]byte("x"))
	if rec.status != http.StatusBadGateway || w.Code != http.StatusBadGateway || w.Body.String() != "x" {
		t.Errorf("status %d, passed %d %q", rec.status, w.Code, w.Body)
	}
	if rec.Unwrap() != w {
		t.Error("Unwrap does not reach the wrapped writer, so http.ResponseController cannot")
	}
}

// TestQuotaHeaders proves the header formats and the choice of the
// tightest rule: least remaining, and of equals the one that frees last.
func TestQuotaHeaders(t *testing.T) {
	minute := &limiter.Rule{Name: "minute", Window: limiter.Window{Duration: time.Minute}}
	day := &limiter.Rule{Name: "day", Window: limiter.Window{Unit: limiter.Day}}
	d := &limiter.Decision{Results: []limiter.Result{
		{Rule: minute, Limit: 15, Remaining: 3, Reset: 41500 * time.Millisecond},
		{Rule: day, Limit: 50, Remaining: 3, Reset: 3 * time.Hour},
	}}
	h := http.Header{}
	setQuotaHeaders(h, d, nil, false)
	want := map[string]string{
		"RateLimit-Policy":      `"minute";q=15;w=60, "day";q=50;w=86400`,
		"RateLimit":             `"minute";r=3;t=42, "day";r=3;t=10800`,
		"X-RateLimit-Limit":     "50",
		"X-RateLimit-Remaining": "3",
		"X-RateLimit-Reset":     "10800",
	}
	for k, v := range want {
		if h.Get(k) != v {
			t.Errorf("%s: %q, want %q", k, h.Get(k), v)
		}
	}
	if retryAfter(0) != 1 || retryAfter(1001*time.Millisecond) != 2 {
		t.Error("Retry-After must round up and be at least 1")
	}
}

// TestQuotaFieldsWaitForTheSend proves that a rule that refused the
// request says it frees up when it would admit the send (its RetryAfter,
// as Retry-After says), not when its oldest record leaves: past its limit
// (exempt sends past it, a lowered per-request limit) that is later, and
// a probe's client that obeyed t=55 was refused again (Retry-After 58).
func TestQuotaFieldsWaitForTheSend(t *testing.T) {
	minute := &limiter.Rule{Name: "minute", Window: limiter.Window{Duration: time.Minute}}
	d := &limiter.Decision{Denier: 0, Results: []limiter.Result{
		{Rule: minute, Limit: 2, Used: 4, Remaining: 0, Reset: 55 * time.Second, Denied: true, RetryAfter: 58 * time.Second},
	}}
	h := http.Header{}
	setQuotaHeaders(h, d, nil, false)
	if got := h.Get("RateLimit"); got != `"minute";r=0;t=58` {
		t.Errorf("RateLimit %q, want t=58", got)
	}
	if got := h.Get("X-RateLimit-Reset"); got != "58" {
		t.Errorf("X-RateLimit-Reset %q, want 58", got)
	}
	// Admitted (the last send it admits), it frees up as its oldest
	// record leaves.
	d.Results[0].Denied, d.Results[0].RetryAfter, d.Results[0].Used = false, 0, 2
	setQuotaHeaders(h, d, nil, false)
	if got := h.Get("RateLimit"); got != `"minute";r=0;t=55` {
		t.Errorf("RateLimit of an admission %q, want t=55", got)
	}
}
