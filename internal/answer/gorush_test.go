package answer

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"

	"github.com/freqcap/caddy-freqcap/internal/jsonbatch"
)

// gorushBatch enumerates the tokens of a gorush body.
func gorushBatch(t testing.TB, body string) *jsonbatch.Batch {
	t.Helper()
	p, err := jsonbatch.ParsePath("notifications.*.tokens.*")
	if err != nil {
		t.Fatal(err)
	}
	b, err := p.Enumerate([]byte(body), 0)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

const gorushBody = `{"notifications":[` +
	`{"tokens":["a","b"],"platform":2,"message":"sale","notif_id":"n1"},` +
	`{"tokens":["c"],"platform":1,"message":"news"},` +
	`{"tokens":["d"],"platform":9}]}`

// TestGorushDenial proves a refused gorush batch is answered as gorush
// answers tokens its provider refused: a 200 with one failed-push log
// per token (logx.LogPushEntry: notif_id, type, platform as
// typeForPlatForm names it, token, the notification's message, the
// rule in error), every token counted, and success "ok".
func TestGorushDenial(t *testing.T) {
	s, _ := Lookup("gorush")
	d := denial()
	d.Batch = gorushBatch(t, gorushBody)
	d.Tickets = []jsonbatch.Capped{
		{Position: 0, Rule: "token_minute", RetryAfter: 42},
		{Position: 1, Rule: "token_minute", RetryAfter: 42},
		{Position: 2, Rule: "same_message", RetryAfter: 7},
		{Position: 3, Rule: "token_minute", RetryAfter: 42},
	}
	rec := httptest.NewRecorder()
	if err := s.Deny(rec, httptest.NewRequest(http.MethodPost, "/api/push", nil), d); err != nil {
		t.Fatal(err)
	}
	want := `{"counts":4,"logs":[` +
		`{"notif_id":"n1","type":"failed-push","platform":"android","token":"a","message":"sale","error":"frequency cap token_minute: retry in 42 s"},` +
		`{"notif_id":"n1","type":"failed-push","platform":"android","token":"b","message":"sale","error":"frequency cap token_minute: retry in 42 s"},` +
		`{"type":"failed-push","platform":"ios","token":"c","message":"news","error":"frequency cap same_message: retry in 7 s"},` +
		`{"type":"failed-push","platform":"","token":"d","message":"","error":"frequency cap token_minute: retry in 42 s"}],"success":"ok"}` + "\n"
	if rec.Code != http.StatusOK || rec.Body.String() != want {
		t.Errorf("got %d %s\nwant 200 %s", rec.Code, rec.Body, want)
	}
	if rec.Header().Get("Retry-After") != "42" || rec.Header().Get("Content-Type") != gorushContentType {
		t.Errorf("headers %v", rec.Header())
	}
}

// TestGorushSplice proves the capped tokens' failed-push logs are merged
// into gorush's answer (appended to logs, added to counts; the other
// members kept) in sync mode, where gorush logs its own failures, and in
// async mode, where its logs are empty; and that an answer that is not
// gorush's success answer is returned unchanged, not ok.
func TestGorushSplice(t *testing.T) {
	b := gorushBatch(t, gorushBody)
	capped := []jsonbatch.Capped{{Position: 1, Rule: "token_minute", RetryAfter: 60}}
	failedB := `{"notif_id":"n1","type":"failed-push","platform":"android","token":"b","message":"sale","error":"frequency cap token_minute: retry in 60 s"}`
	upstreamFailed := `{"type":"failed-push","platform":"ios","token":"c","message":"news","error":"BadDeviceToken"}`
	for _, tc := range []struct {
		name   string
		status int
		body   string
		want   string // "" for unchanged, not ok
	}{
		{"sync", 200, `{"counts":3,"logs":[` + upstreamFailed + `],"success":"ok"}`,
			`{"counts":4,"logs":[` + upstreamFailed + `,` + failedB + `],"success":"ok"}`},
		{"async", 200, `{"counts":3,"logs":[],"success":"ok"}`, `{"counts":4,"logs":[` + failedB + `],"success":"ok"}`},
		{"spaced, null logs, other members", 200, ` { "success" : "ok", "logs" : null, "counts" : 3, "x" : [ 1, 2 ] } `,
			`{"counts":4,"logs":[` + failedB + `],"success":"ok","x":[1,2]}`},
		{"gorush's 400", 400, `{"code":400,"message":"Missing notifications field."}`, ""},
		{"a 500", 500, `{"counts":3,"logs":[],"success":"ok"}`, ""},
		{"not JSON", 200, `ok`, ""},
		{"an array", 200, `[]`, ""},
		{"no counts", 200, `{"logs":[],"success":"ok"}`, ""},
		{"counts not a whole number", 200, `{"counts":1.5,"logs":[],"success":"ok"}`, ""},
		{"counts negative", 200, `{"counts":-1,"logs":[],"success":"ok"}`, ""},
		{"counts that would overflow", 200, `{"counts":9223372036854775807,"logs":[],"success":"ok"}`, ""},
		{"counts a string", 200, `{"counts":"3","logs":[],"success":"ok"}`, ""},
		{"no logs", 200, `{"counts":3,"success":"ok"}`, ""},
		{"logs an object", 200, `{"counts":3,"logs":{},"success":"ok"}`, ""},
		{"a member twice", 200, `{"counts":3,"counts":3,"logs":[]}`, ""},
	} {
		out, ok := gorushSplice(tc.status, []byte(tc.body), b, capped)
		switch {
		case tc.want == "" && (ok || string(out) != tc.body):
			t.Errorf("%s: %s ok=%v, want it unchanged, not ok", tc.name, out, ok)
		case tc.want != "" && (!ok || string(out) != tc.want):
			t.Errorf("%s: %s ok=%v\nwant %s", tc.name, out, ok, tc.want)
		}
	}
	// Nothing capped: the answer as it came.
	if out, ok := gorushSplice(200, []byte(`{"counts":1,"logs":[]}`), b, nil); !ok || string(out) != `{"counts":1,"logs":[]}` {
		t.Errorf("nothing capped: %s %v", out, ok)
	}
}

// TestGorushFailedOutsideNotifications proves an entry that is not under
// notifications.<n> (answer gorush on another shape) still gets a
// failed-push log with its token and the rule, and no other field.
func TestGorushFailedOutsideNotifications(t *testing.T) {
	p, _ := jsonbatch.ParsePath("*.to")
	b, err := p.Enumerate([]byte(`[{"to":"x","message":"m","platform":2}]`), 0)
	if err != nil {
		t.Fatal(err)
	}
	got := gorushFailed(b, &jsonbatch.Capped{Position: 0, Rule: "r", RetryAfter: 1})
	want := gorushLog{Type: "failed-push", Token: "x", Error: "frequency cap r: retry in 1 s"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got %+v, want %+v", got, want)
	}
	if got := gorushFailed(b, &jsonbatch.Capped{Position: 5, Rule: "r", RetryAfter: 1}); got.Token != "" {
		t.Errorf("a position outside the batch: %+v", got)
	}
}

// FuzzGorushSplice proves gorushSplice never panics on any upstream
// answer, returns an answer it cannot rewrite unchanged, and, when it
// rewrites one, gives valid JSON with the capped token's log appended and
// counted.
func FuzzGorushSplice(f *testing.F) {
	for _, s := range []string{
		`{"counts":3,"logs":[],"success":"ok"}`, `{"counts":0,"logs":null}`, `{"logs":[{"a":1}],"counts":1,"x":"<&>"}`,
		`{"counts":1e2,"logs":[]}`, `[]`, `"x"`, `{"counts":1,"logs":[1,`, ``, `{"counts":1,"logs":[],"counts":2}`,
	} {
		f.Add(200, []byte(s))
	}
	b := gorushBatch(f, gorushBody)
	capped := []jsonbatch.Capped{{Position: 2, Rule: "r", RetryAfter: 3}}
	f.Fuzz(func(t *testing.T, status int, body []byte) {
		in := append([]byte(nil), body...)
		out, ok := gorushSplice(status, body, b, capped)
		if !ok {
			if string(out) != string(in) {
				t.Fatalf("not ok, yet changed: %q -> %q", in, out)
			}
			return
		}
		var before, after struct {
			Counts int64             `json:"counts"`
			Logs   []json.RawMessage `json:"logs"`
		}
		if json.Unmarshal(in, &before) != nil || json.Unmarshal(out, &after) != nil {
			t.Fatalf("rewrote %q into %q", in, out)
		}
		if after.Counts != before.Counts+1 || len(after.Logs) != len(before.Logs)+1 {
			t.Fatalf("%q -> %q: counts or logs not one more", in, out)
		}
	})
}
