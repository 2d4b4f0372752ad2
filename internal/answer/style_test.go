package answer

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/jsonbatch"
)

var now = time.Unix(1_800_000_000, 0)

func denial() *Denial {
	return &Denial{
		Status: 429, Rule: "recipient_minute", Limit: 15, RetryAfter: 42,
		Message: "rule recipient_minute allows 15 per 1m0s; retry in 42 s",
		Problem: map[string]any{"type": "t", "rule": "recipient_minute"},
		Tickets: []jsonbatch.Capped{{Position: 0, Rule: "recipient_minute", RetryAfter: 42}, {Position: 1, Rule: "same_content", RetryAfter: 7}},
		Now:     now,
	}
}

func decode(t *testing.T, rec *httptest.ResponseRecorder) any {
	t.Helper()
	var v any
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("answer is not JSON: %v: %s", err, rec.Body)
	}
	return v
}

// TestDenialShapes proves each style's denial is its provider's own
// rate-limit answer, with the members its SDK keys on and nothing that
// would make the SDK read it as something else, and that Retry-After is
// kept in every style.
func TestDenialShapes(t *testing.T) {
	for _, tc := range []struct {
		style  string
		status int
		body   string
		header map[string]string
	}{
		{"problem", 429, `{"rule":"recipient_minute","type":"t"}`, map[string]string{"Content-Type": "application/problem+json"}},
		{"apns", 429, `{"reason":"TooManyRequests"}`, map[string]string{"apns-id": "5c1f0e4e-0000-4000-8000-000000000001"}},
		{"fcm", 429, `{"error":{"code":429,"message":"rule recipient_minute allows 15 per 1m0s; retry in 42 s","status":"RESOURCE_EXHAUSTED","details":[{"@type":"type.googleapis.com/google.firebase.fcm.v1.FcmError","errorCode":"QUOTA_EXCEEDED"}]}}`, nil},
		{"sendgrid", 429, `{"errors":[{"field":null,"message":"rule recipient_minute allows 15 per 1m0s; retry in 42 s"}]}`,
			map[string]string{"X-RateLimit-Limit": "15", "X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1800000042"}},
		{"twilio", 429, `{"code":20429,"message":"Too Many Requests","more_info":"https://www.twilio.com/docs/errors/20429","status":429}`, nil},
		{"webpush", 429, `{"code":429,"error":"Too Many Requests","message":"rule recipient_minute allows 15 per 1m0s; retry in 42 s"}`, nil},
		{"expo", 200, `{"data":[` +
			`{"status":"error","message":"frequency cap recipient_minute: retry in 42 s","details":{"error":"MessageRateExceeded","rule":"recipient_minute","retry_after":42}},` +
			`{"status":"error","message":"frequency cap same_content: retry in 7 s","details":{"error":"MessageRateExceeded","rule":"same_content","retry_after":7}}]}`, nil},
		// A send that is not a batch names no token to log (see
		// TestGorushDenial for a batch).
		{"gorush", 429, `{"code":429,"message":"rule recipient_minute allows 15 per 1m0s; retry in 42 s"}`, map[string]string{"Content-Type": "application/json; charset=utf-8"}},
	} {
		t.Run(tc.style, func(t *testing.T) {
			s, ok := Lookup(tc.style)
			if !ok {
				t.Fatal("no such style")
			}
			rec := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodPost, "/", nil)
			r.Header.Set("apns-id", "5c1f0e4e-0000-4000-8000-000000000001")
			if err := s.Deny(rec, r, denial()); err != nil {
				t.Fatal(err)
			}
			var want any
			_ = json.Unmarshal([]byte(tc.body), &want)
			if rec.Code != tc.status || !reflect.DeepEqual(decode(t, rec), want) {
				t.Errorf("got %d %s\nwant %d %s", rec.Code, rec.Body, tc.status, tc.body)
			}
			if got := rec.Header().Get("Retry-After"); got != "42" {
				t.Errorf("Retry-After %q", got)
			}
			for k, v := range tc.header {
				if got := rec.Header().Get(k); got != v {
					t.Errorf("%s: %q, want %q", k, got, v)
				}
			}
		})
	}
}

// TestExpoSingleMessage proves that a message sent as an object gets one
// ticket as an object, as Expo answers it.
func TestExpoSingleMessage(t *testing.T) {
	s, _ := Lookup("expo")
	d := denial()
	d.Tickets, d.Single = d.Tickets[:1], true
	rec := httptest.NewRecorder()
	_ = s.Deny(rec, httptest.NewRequest(http.MethodPost, "/", nil), d)
	if !strings.HasPrefix(rec.Body.String(), `{"data":{"status":"error"`) {
		t.Errorf("single message: %s", rec.Body)
	}
}

// TestFailureShapes proves every style writes the gateway's own 400,
// 413, 415 and 503 as its provider writes such an error, with the
// gateway's status, and that a 415 names the codings read.
func TestFailureShapes(t *testing.T) {
	for _, status := range []int{400, 413, 415, 503} {
		for _, name := range Names() {
			s, _ := Lookup(name)
			rec := httptest.NewRecorder()
			f := &Failure{Status: status, Reason: "something about the request", Dimension: "recipient"}
			if err := s.Fail(rec, httptest.NewRequest(http.MethodPost, "/", nil), f, "gzip, deflate, zstd"); err != nil {
				t.Fatal(err)
			}
			if rec.Code != status {
				t.Errorf("%s %d: status %d", name, status, rec.Code)
			}
			v := decode(t, rec).(map[string]any)
			var ok bool
			switch name {
			case "problem":
				ok = v["error"] == f.Reason && v["dimension"] == "recipient"
			case "apns":
				ok = len(v) == 1 && v["reason"] != "" && rec.Header().Get("apns-id") != ""
			case "fcm":
				e := v["error"].(map[string]any)
				ok = e["code"] == float64(status) && len(e["details"].([]any)) == 1
			case "sendgrid":
				es := v["errors"].([]any)
				ok = len(es) == 1 && es[0].(map[string]any)["field"] == "recipient"
			case "twilio":
				_, hasType := v["type"]
				ok = v["status"] == float64(status) && v["code"] != nil && !hasType
			case "webpush":
				ok = v["code"] == float64(status)
			case "expo":
				es := v["errors"].([]any)
				ok = len(es) == 1 && es[0].(map[string]any)["code"] != ""
			case "gorush":
				ok = len(v) == 2 && v["code"] == float64(status) && v["message"] == f.Reason
			}
			if !ok {
				t.Errorf("%s %d: %s", name, status, rec.Body)
			}
			if got := rec.Header().Get("Accept-Encoding"); (status == 415) != (got != "") {
				t.Errorf("%s %d: Accept-Encoding %q", name, status, got)
			}
		}
	}
}

// TestAPNsIDMadeWhenMissing proves a denial of a push sent without an
// apns-id still carries one, as APNs answers.
func TestAPNsIDMadeWhenMissing(t *testing.T) {
	s, _ := Lookup("apns")
	rec := httptest.NewRecorder()
	_ = s.Deny(rec, httptest.NewRequest(http.MethodPost, "/", nil), denial())
	if id := rec.Header().Get("apns-id"); len(id) != 36 || id[14] != '4' {
		t.Errorf("apns-id %q is not a version 4 UUID", id)
	}
}
