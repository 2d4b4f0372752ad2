package caddymodule

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// The end-to-end tests run one Caddy inside the test binary (caddytest
// starts it on first use) and load a config per test through its admin
// endpoint, so they run one after the other, never in parallel. The admin
// endpoint gets a free port, not caddytest's fixed 2999, so that other test
// binaries running at the same time cannot collide with this one.
var admin struct {
	once sync.Once
	port int
}

func adminPort(t *testing.T) int {
	admin.once.Do(func() { admin.port = freePort(t) })
	return admin.port
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// prefixSeq gives every test its own key_prefix, so that no test sees the
// counts of another through a shared memory store or Redis.
var prefixSeq atomic.Int64

func testPrefix() string { return fmt.Sprintf("t%d:", prefixSeq.Add(1)) }

// gateway is Caddy serving one site on a free port.
type gateway struct {
	t      *testing.T
	tester *caddytest.Tester
	url    string
	config string
}

// globals is the global options block of every test config.
const globals = `{
	admin localhost:%d
	persist_config off
	auto_https off
	default_bind 127.0.0.1
	grace_period 200ms
	skip_install_trust
}
`

// startGateway loads a config whose only site serves body (the inside of
// the site block) on a free port.
func startGateway(t *testing.T, body string) *gateway {
	t.Helper()
	g := &gateway{t: t, url: fmt.Sprintf("http://127.0.0.1:%d", freePort(t))}
	g.tester = caddytest.NewTester(t).WithDefaultOverrides(caddytest.Config{AdminPort: adminPort(t)})
	g.load(body)
	return g
}

// load replaces the running config with one serving body.
func (g *gateway) load(body string) {
	g.t.Helper()
	g.config = fmt.Sprintf(globals, adminPort(g.t)) + fmt.Sprintf(":%s {\n%s\n}\n", g.url[strings.LastIndexByte(g.url, ':')+1:], body)
	g.tester.InitServer(g.config, "caddyfile")
	if g.t.Failed() {
		g.t.FailNow()
	}
	g.settle()
}

// settle waits out the old server's grace period (200ms in globals): until
// it has stopped, a new connection may still reach it and be closed.
func (g *gateway) settle() {
	time.Sleep(250 * time.Millisecond)
	client.CloseIdleConnections()
}

// reloadSame loads the current config again; Cache-Control: must-revalidate
// makes Caddy provision it anew instead of noticing that nothing changed.
func (g *gateway) reloadSame() {
	g.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, fmt.Sprintf("http://localhost:%d/load", adminPort(g.t)), strings.NewReader(g.config))
	req.Header.Set("Content-Type", "text/caddyfile")
	req.Header.Set("Cache-Control", "must-revalidate")
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatalf("reloading: %v", err)
	}
	defer res.Body.Close()
	if res.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(res.Body)
		g.t.Fatalf("reloading: %d %s", res.StatusCode, b)
	}
	g.settle()
}

var client = &http.Client{Timeout: 10 * time.Second}

// answer is a response read whole.
type answer struct {
	status int
	header http.Header
	body   []byte
}

func (a *answer) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(a.body, &m); err != nil {
		t.Fatalf("answer body is not JSON: %v: %s", err, a.body)
	}
	return m
}

// post sends body to path with the given content type and extra headers
// ("Name: value").
func (g *gateway) post(path, contentType, body string, headers ...string) *answer {
	g.t.Helper()
	req, err := http.NewRequest(http.MethodPost, g.url+path, strings.NewReader(body))
	if err != nil {
		g.t.Fatal(err)
	}
	req.Header.Set("Content-Type", contentType)
	for _, h := range headers {
		if h == "" {
			continue
		}
		k, v, _ := strings.Cut(h, ":")
		req.Header.Set(k, strings.TrimSpace(v))
	}
	res, err := client.Do(req)
	if err != nil {
		g.t.Fatalf("POST %s: %v", path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		g.t.Fatalf("reading answer: %v", err)
	}
	return &answer{status: res.StatusCode, header: res.Header, body: b}
}

// send posts a JSON message.
func (g *gateway) send(path string, msg map[string]any, headers ...string) *answer {
	g.t.Helper()
	b, err := json.Marshal(msg)
	if err != nil {
		g.t.Fatal(err)
	}
	return g.post(path, "application/json", string(b), headers...)
}

// upstream is a push provider that records what it receives. It answers
// {"status":"queued"}, or the status named by the X-Want-Status header.
type upstream struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []received
}

type received struct {
	body          []byte
	contentLength int64
	header        http.Header
}

func startUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.reqs = append(u.reqs, received{body: b, contentLength: r.ContentLength, header: r.Header.Clone()})
		u.mu.Unlock()
		w.Header().Set("X-Upstream", "push")
		w.Header().Set("Content-Type", "application/json")
		status := http.StatusOK
		if s := r.Header.Get("X-Want-Status"); s != "" {
			status, _ = strconv.Atoi(s)
		}
		w.WriteHeader(status)
		io.WriteString(w, `{"status":"queued"}`)
	}))
	t.Cleanup(u.Close)
	return u
}

// addr is the host:port reverse_proxy dials.
func (u *upstream) addr() string { return u.Listener.Addr().String() }

func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.reqs)
}

func (u *upstream) last() received {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.reqs[len(u.reqs)-1]
}

// backend is a store the end-to-end tests run on: its redis line (empty
// for memory).
type backend struct {
	name  string
	redis func(t *testing.T) string
}

var backends = []backend{
	{"memory", func(*testing.T) string { return "" }},
	{"redis", func(t *testing.T) string { return "redis " + redistest.URL(t) }},
}

// eachBackend runs f on the memory store and on a real redis-server.
func eachBackend(t *testing.T, f func(t *testing.T, redisLine string)) {
	for _, b := range backends {
		t.Run(b.name, func(t *testing.T) { f(t, b.redis(t)) })
	}
}

// expectStatus fails the test unless a has the status.
func expectStatus(t *testing.T, a *answer, status int) {
	t.Helper()
	if a.status != status {
		t.Fatalf("status %d, want %d; body %s", a.status, status, bytes.TrimSpace(a.body))
	}
}
