package caddymodule_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// gorushLog is one entry of gorush's logs (its logx.LogPushEntry).
type gorushLog struct {
	ID       string `json:"notif_id,omitempty"`
	Type     string `json:"type"`
	Platform string `json:"platform"`
	Token    string `json:"token"`
	Message  string `json:"message"`
	Error    string `json:"error"`
}

// gorushAnswer is gorush's answer to POST /api/push.
type gorushAnswer struct {
	Counts  int         `json:"counts"`
	Logs    []gorushLog `json:"logs"`
	Success string      `json:"success"`
}

// gorushUpstream is a gorush in sync mode: it answers every push with
// {"counts", "logs", "success": "ok"}, counts being every token (and one
// for a topic), logs a failed-push entry for each token that starts with
// "bad" (as its providers refuse a bad token). A body it cannot bind is
// its 400 {"code", "message"}; X-Want-Status answers that status with
// gorush's success body, X-Want-Body that body.
type gorushUpstream struct {
	*httptest.Server
	mu     sync.Mutex
	bodies [][]byte
}

func startGorush(t *testing.T) *gorushUpstream {
	u := &gorushUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.bodies = append(u.bodies, b)
		u.mu.Unlock()
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		if body := r.Header.Get("X-Want-Body"); body != "" {
			io.WriteString(w, body)
			return
		}
		var req struct {
			Notifications []struct {
				ID       string   `json:"notif_id"`
				Tokens   []string `json:"tokens"`
				Platform int      `json:"platform"`
				Message  string   `json:"message"`
				Topic    string   `json:"topic"`
			} `json:"notifications"`
		}
		if err := json.Unmarshal(b, &req); err != nil || len(req.Notifications) == 0 {
			w.WriteHeader(http.StatusBadRequest)
			io.WriteString(w, `{"code":400,"message":"Missing notifications field."}`)
			return
		}
		a := gorushAnswer{Logs: []gorushLog{}, Success: "ok"}
		for _, n := range req.Notifications {
			a.Counts += len(n.Tokens)
			if n.Topic != "" {
				a.Counts++
			}
			for _, tok := range n.Tokens {
				if strings.HasPrefix(tok, "bad") {
					a.Logs = append(a.Logs, gorushLog{ID: n.ID, Type: "failed-push", Platform: [...]string{"", "ios", "android", "huawei"}[n.Platform%4], Token: tok, Message: n.Message, Error: "BadDeviceToken"})
				}
			}
		}
		status := http.StatusOK
		if s := r.Header.Get("X-Want-Status"); s != "" {
			status, _ = strconv.Atoi(s)
		}
		out, _ := json.Marshal(a)
		w.WriteHeader(status)
		w.Write(out)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *gorushUpstream) addr() string { return u.Listener.Addr().String() }

// received returns every body gorush got.
func (u *gorushUpstream) received() [][]byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([][]byte(nil), u.bodies...)
}

// gorushOf decodes a gorush answer, failing the test unless it is one.
func gorushOf(t *testing.T, a *answer) gorushAnswer {
	t.Helper()
	var g gorushAnswer
	if err := decodeStrict(a.body, &g); err != nil || g.Success != "ok" || g.Logs == nil {
		t.Fatalf("not a gorush answer: %s (%v)", a.body, err)
	}
	return g
}

// cappedBy lists the tokens of the failed-push logs whose error names
// rule as the cap that refused them, and "?" for every other log.
func cappedBy(g gorushAnswer, rule string) []string {
	var out []string
	for _, l := range g.Logs {
		rest, ok := strings.CutPrefix(l.Error, "frequency cap "+rule+": retry in ")
		if n, err := strconv.Atoi(strings.TrimSuffix(rest, " s")); l.Type != "failed-push" || !ok || err != nil || n < 1 {
			out = append(out, "?")
			continue
		}
		out = append(out, l.Token)
	}
	return out
}

func gorushSite(upstream string, extra ...string) string {
	return fmt.Sprintf(`
	frequency_cap /api/push {
		key_prefix %s
		answer gorush
		%s
		dimension token {json.notifications.*.tokens.*}
		rule token_minute {
			by     token
			limit  1
			window 1m
		}
	}
	reverse_proxy %s`, testPrefix(), strings.Join(extra, "\n\t\t"), upstream)
}

// TestAnswerGorush proves answer gorush under batch drop: a partly capped
// send goes on without its capped tokens, and gorush's answer comes back
// with a failed-push log for each (token, the notification's notif_id,
// platform and message, the rule in the error) after gorush's own logs,
// counted in counts as gorush counts a failed token; a send whose every
// token is capped is answered in the same shape with a 200 without
// reaching gorush. An upstream answer that is not gorush's success answer
// (a 500, a body that is not JSON) is passed on unchanged and counted in
// splice_failures_total; a body the gateway cannot read is gorush's own
// 400 {"code", "message"}, and so is a batch past max_batch (413).
func TestAnswerGorush(t *testing.T) {
	up := startGorush(t)
	name := batchName()
	g := startGateway(t, gorushSite(up.addr(), "name "+name, "batch drop", "max_batch 4"))
	const push = "/api/push"

	first := `{"notifications":[{"tokens":["a","b"],"platform":2,"message":"sale","notif_id":"n1"},{"tokens":["c"],"platform":1,"message":"news"}]}`
	a := g.post(push, "application/json", first)
	expectStatus(t, a, http.StatusOK)
	if got := gorushOf(t, a); got.Counts != 3 || len(got.Logs) != 0 {
		t.Errorf("first send: %s, want gorush's counts 3, no logs", a.body)
	}

	// a and c are capped; d goes on, and bad-e fails at gorush itself.
	a = g.post(push, "application/json", `{"notifications":[{"tokens":["a","d","bad-e"],"platform":2,"message":"sale","notif_id":"n2"},{"tokens":["c"],"platform":1,"message":"news"}]}`)
	expectStatus(t, a, http.StatusOK)
	if got := dropped(t, a); fmt.Sprint(got) != "[notifications.0.tokens.0 notifications.1.tokens.0]" {
		t.Errorf("dropped %v", got)
	}
	bodies := up.received()
	if got := string(bodies[len(bodies)-1]); got != `{"notifications":[{"tokens":["d","bad-e"],"platform":2,"message":"sale","notif_id":"n2"}]}` {
		t.Errorf("gorush got %s", got)
	}
	if n, _ := strconv.Atoi(a.header.Get("Content-Length")); n != len(a.body) {
		t.Errorf("Content-Length %q for %d bytes", a.header.Get("Content-Length"), len(a.body))
	}
	got := gorushOf(t, a)
	want := []gorushLog{
		{ID: "n2", Type: "failed-push", Platform: "android", Token: "bad-e", Message: "sale", Error: "BadDeviceToken"},
		{ID: "n2", Type: "failed-push", Platform: "android", Token: "a", Message: "sale"},
		{Type: "failed-push", Platform: "ios", Token: "c", Message: "news"},
	}
	if len(got.Logs) == len(want) {
		for i := 1; i < len(want); i++ {
			want[i].Error = got.Logs[i].Error // checked by cappedBy
		}
	}
	if got.Counts != 4 || fmt.Sprint(got.Logs) != fmt.Sprint(want) || fmt.Sprint(cappedBy(got, "token_minute")) != "[? a c]" {
		t.Errorf("partly capped: %s\nwant counts 4 and logs %v, a and c by token_minute", a.body, want)
	}

	// Every token capped: gorush's answer, from the gateway alone.
	sent := len(up.received())
	a = g.post(push, "application/json", `{"notifications":[{"tokens":["a","b"],"platform":2,"message":"again"}]}`)
	expectStatus(t, a, http.StatusOK)
	got = gorushOf(t, a)
	if got.Counts != 2 || fmt.Sprint(cappedBy(got, "token_minute")) != "[a b]" {
		t.Errorf("all capped: %s", a.body)
	}
	if a.header.Get("Retry-After") == "" || a.header.Get("Content-Type") != "application/json; charset=utf-8" {
		t.Errorf("all capped: headers %v", a.header)
	}
	if len(up.received()) != sent {
		t.Error("an all-capped send reached gorush")
	}

	failures := func() float64 {
		s, _ := scrape(t)
		return s[fmt.Sprintf(`caddy_frequency_cap_splice_failures_total{handler=%q}`, name)]
	}
	before := failures()
	for i, c := range []struct {
		header string
		status int
		answer string
	}{
		{"X-Want-Status: 500", http.StatusInternalServerError, `{"counts":1,"logs":[],"success":"ok"}`},
		{"X-Want-Body: queued", http.StatusOK, `queued`},
	} {
		a := g.post(push, "application/json", fmt.Sprintf(`{"notifications":[{"tokens":["a","f%d"],"platform":2}]}`, i), c.header)
		expectStatus(t, a, c.status)
		if string(a.body) != c.answer {
			t.Errorf("%s: %s, want the upstream's answer unchanged: %s", c.header, a.body, c.answer)
		}
	}
	if got := failures() - before; got != 2 {
		t.Errorf("splice_failures_total rose by %v, want 2", got)
	}

	for _, c := range []struct {
		body   string
		status int
		want   string
	}{
		{`{"notifications":`, http.StatusBadRequest, `{"code":400,"message":"request body is not valid JSON`},
		{`{"notifications":[{"tokens":["1","2","3","4","5"]}]}`, http.StatusRequestEntityTooLarge, `{"code":413,"message":"the batch has more than max_batch (4) entries"}`},
	} {
		a := g.post(push, "application/json", c.body)
		expectStatus(t, a, c.status)
		if !strings.HasPrefix(string(a.body), c.want) {
			t.Errorf("%s: %s, want gorush's error %s", c.body, a.body, c.want)
		}
	}
}

// TestAnswerGorushReject proves answer gorush under batch reject: a batch
// with a capped token is refused whole, with a failed-push log for every
// token (the capped one by its rule, the others by the rule that refused
// the batch) in a 200 without reaching gorush, and nothing is recorded
// for the others. A cap set without a batch dimension, which names no
// token, denies with gorush's error shape and 429; under on_error deny a
// store failure is gorush's error shape with 503.
func TestAnswerGorushReject(t *testing.T) {
	up := startGorush(t)
	down := fmt.Sprintf("redis redis://127.0.0.1:%d/0", freePort(t))
	g := startGateway(t, fmt.Sprintf(`
	route /down {
		frequency_cap {
			key_prefix %s
			answer gorush
			%s
			on_error deny
			dimension token {json.notifications.*.tokens.*}
			rule token_minute {
				by     token
				limit  1
				window 1m
			}
		}
		respond "not reached" 500
	}
	route /single {
		frequency_cap {
			key_prefix %s
			answer gorush
			dimension app {json.app}
			rule app_minute {
				by     app
				limit  1
				window 1m
			}
		}
		respond "sent" 200
	}`, testPrefix(), down, testPrefix())+gorushSite(up.addr()))
	const push = "/api/push"
	expectStatus(t, g.post(push, "application/json", `{"notifications":[{"tokens":["x"],"platform":2}]}`), http.StatusOK)
	sent := len(up.received())
	a := g.post(push, "application/json", `{"notifications":[{"tokens":["x","y"],"platform":2,"message":"m"}]}`)
	expectStatus(t, a, http.StatusOK)
	got := gorushOf(t, a)
	if got.Counts != 2 || fmt.Sprint(cappedBy(got, "token_minute")) != "[x y]" {
		t.Errorf("refused batch: %s", a.body)
	}
	if len(up.received()) != sent {
		t.Error("a refused batch reached gorush")
	}
	a = g.post(push, "application/json", `{"notifications":[{"tokens":["y"],"platform":2}]}`)
	if got := gorushOf(t, a); got.Counts != 1 || len(got.Logs) != 0 {
		t.Errorf("y after a refused batch (nothing recorded): %s", a.body)
	}

	expectStatus(t, g.post("/single", "application/json", `{"app":"shop"}`), http.StatusOK)
	a = g.post("/single", "application/json", `{"app":"shop"}`)
	expectStatus(t, a, http.StatusTooManyRequests)
	if want := `{"code":429,"message":"rule app_minute allows 1 per 1m0s; retry in `; !strings.HasPrefix(string(a.body), want) || a.header.Get("Retry-After") == "" {
		t.Errorf("a capped send that is not a batch: %s, want %s...", a.body, want)
	}

	a = g.post("/down", "application/json", `{"notifications":[{"tokens":["x"],"platform":2}]}`)
	expectStatus(t, a, http.StatusServiceUnavailable)
	if string(a.body) != `{"code":503,"message":"frequency cap store unavailable"}`+"\n" {
		t.Errorf("store down: %s", a.body)
	}
}

// TestAnswerGorushWithSpliceExpo proves that answer gorush beside splice
// expo, which would answer a gorush sender with Expo's tickets, is a
// config error naming the splice line, in the JSON form too.
func TestAnswerGorushWithSpliceExpo(t *testing.T) {
	src := ":8080 {\n\tfrequency_cap {\n\t\tanswer gorush\n\t\tbatch drop\n\t\tsplice expo\n\t\tdimension token {json.notifications.*.tokens.*}\n" +
		"\t\trule r {\n\t\t\tby token\n\t\t\tlimit 2\n\t\t\twindow 1m\n\t\t}\n\t}\n\trespond ok\n}\n"
	_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(src), nil)
	if err == nil || !strings.Contains(err.Error(), "splice expo does not go with answer gorush") || !strings.HasSuffix(err.Error(), "at Caddyfile:5") {
		t.Errorf("error %v, want splice expo refused beside answer gorush at Caddyfile:5", err)
	}

	cfg := fmt.Sprintf(`{"admin":{"listen":"localhost:%d","config":{"persist":false}},`, adminPort(t)) +
		`"apps":{"http":{"servers":{"s":{"listen":["127.0.0.1:0"],"routes":[{"handle":[{"handler":"frequency_cap","answer":"gorush","batch":"drop","splice":"expo",` +
		`"dimensions":{"token":"{json.notifications.*.tokens.*}"},"rules":[{"name":"r","by":["token"],"limit":2,"window":"1m"}]}]}]}}}}}`
	res, err := adminClient.Post(fmt.Sprintf("http://localhost:%d/load", adminPort(t)), "application/json", strings.NewReader(cfg))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(res.Body)
	res.Body.Close()
	if res.StatusCode == http.StatusOK || !strings.Contains(string(b), "splice expo does not go with answer gorush") {
		t.Errorf("load answered %d %s", res.StatusCode, b)
	}
}
