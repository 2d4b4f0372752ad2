package redisstore

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// ExpectPathEnv, when set (native or script), is the write path the
// tests must find on the server they run against: CI sets it for each
// build, so that a run on Valkey 8.1.1 fails unless it proves the native
// path, rather than passing on the script.
const expectPathEnv = "FREQCAP_EXPECT_WRITE_PATH"

// expectedPath is the path a node should get, from the tests' own account
// of the server (redistest.HasSetIFEQ on key, which the node serves), held
// to FREQCAP_EXPECT_WRITE_PATH when checkEnv.
func expectedPath(t *testing.T, c *redis.Client, key string, checkEnv bool) WritePath {
	t.Helper()
	p := WriteScript
	if redistest.HasSetIFEQ(t, c, key) {
		p = WriteNative
	}
	if want := os.Getenv(expectPathEnv); checkEnv && want != "" && want != string(p) {
		t.Fatalf("%s=%s, but the server at %s has %s writes (SET … IFEQ %s)", expectPathEnv, want, c.Options().Addr, p,
			map[bool]string{true: "runs", false: "is a syntax error"}[p == WriteNative])
	}
	return p
}

// nativeWrites asks s's node now and reports whether it writes natively.
func nativeWrites(t *testing.T, s *Store) bool {
	t.Helper()
	paths, err := s.DetectWritePaths(context.Background())
	if err != nil || len(paths) != 1 {
		t.Fatalf("DetectWritePaths = %v, %v; want one node", paths, err)
	}
	return paths[0].Path == WriteNative
}

// isNativeWrite reports whether c is one of the store's native writes: SET
// key value IFEQ old PX ttl, or SET key value NX PX ttl.
func isNativeWrite(c redis.Cmder) bool {
	args := c.Args()
	if c.Name() != "set" || len(args) < 4 {
		return false
	}
	flag, _ := args[3].(string)
	return flag == "ifeq" || flag == "nx"
}

// writeCounter is a client hook that counts, per node, the store's writes
// by kind (SET … IFEQ, SET … NX, commit.lua) and its freqcap.lua runs.
type writeCounter struct {
	mu     sync.Mutex
	byNode map[string]map[string]int
}

func (w *writeCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (w *writeCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return next // the writes are pipelined
}

func (w *writeCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return w.pipelineHook("", next)
}

// pipelineHook counts under node (one writeCounter can watch every node
// of a cluster: see onNodes).
func (w *writeCounter) pipelineHook(node string, next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if len(cmds) == 1 && cmds[0].Name() == "eval" {
			return next(ctx, cmds) // a NOSCRIPT retry, sent alone: not counted
		}
		w.mu.Lock()
		if w.byNode == nil {
			w.byNode = map[string]map[string]int{}
		}
		n := w.byNode[node]
		if n == nil {
			n = map[string]int{}
			w.byNode[node] = n
		}
		counted := false
		for _, c := range cmds {
			switch c.Name() {
			case "hello", "client", "auth", "select", "command": // a connection's set-up, the store asking the node
				continue
			}
			if !counted {
				n["round trips"]++
				counted = true
			}
			switch {
			case isNativeWrite(c):
				n["set "+c.Args()[3].(string)]++
			case c.Name() == "evalsha":
				switch sha, _ := c.Args()[1].(string); sha {
				case commitScript.Hash():
					n["commit"]++
				case commitNodeScript.Hash():
					n["commit node"]++
				default:
					n["freqcap"]++
				}
			}
		}
		w.mu.Unlock()
		return next(ctx, cmds)
	}
}

// take returns the counts of node and starts them again.
func (w *writeCounter) take(node string) map[string]int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.byNode[node]
	delete(w.byNode, node)
	if n == nil {
		n = map[string]int{}
	}
	return n
}

// nodeHook puts a writeCounter on one node's client of a cluster client.
type nodeHook struct {
	w    *writeCounter
	node string
}

func (h nodeHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h nodeHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h nodeHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return h.w.pipelineHook(h.node, next)
}

// checkWrites fails t unless the writes counted on a node match its path:
// native writes and no commit.lua on a native node, none on a script one.
func checkWrites(t *testing.T, what string, n map[string]int, path WritePath) {
	t.Helper()
	native := n["set ifeq"] + n["set nx"]
	switch {
	case path == WriteNative && native == 0:
		t.Errorf("%s: the node has SET IFEQ, but the store sent %v: want SET … IFEQ or SET … NX writes", what, n)
	case path == WriteScript && native > 0:
		t.Errorf("%s: the node has no SET IFEQ, but the store sent %v", what, n)
	}
	t.Logf("%s (%s): %v", what, path, n)
}

// The write path of decisions made in Go follows what the server can do,
// as the tests find it themselves: on a server with SET … IFEQ (Valkey
// 8.1) a batch send's keys and a single send's key are written with SET …
// NX (new keys) and then SET … IFEQ, pipelined, in the second of two round
// trips; elsewhere, and with NoNativeWrite, with commit.lua. The store
// asks the node once, before its first write there, says so through
// OnWritePath, and lists it in WritePaths.
func TestWritePathFollowsTheServer(t *testing.T) {
	c := redistest.Client(t)
	want := expectedPath(t, c, "freqcap-test:ifeq-probe", true)
	w := &writeCounter{}
	c.AddHook(w)
	var mu sync.Mutex
	var told []NodeWritePath
	s := New(c, Options{Timeout: 5 * time.Second, GoBatchMin: 1, OnWritePath: func(p NodeWritePath) {
		mu.Lock()
		told = append(told, p)
		mu.Unlock()
	}})
	defer s.Close()
	rule := &limiter.Rule{Name: "hour", By: []string{"recipient"}, Limit: 10, Window: limiter.Window{Duration: time.Hour}}
	at := limitertest.MustParse(t, "2026-05-01T10:00:00Z")
	batch := func(at time.Time) []limiter.Request {
		var reqs []limiter.Request
		for _, who := range []string{"a", "b", "c", "a"} {
			reqs = append(reqs, *limitertest.Req(at, limitertest.Vals{"recipient": who}, rule))
		}
		return reqs
	}
	for round, wantKind := range []string{"set nx", "set ifeq"} {
		for i, d := range limitertest.MustBatch(t, s, batch(at.Add(time.Duration(round)*time.Second)), limiter.BatchEach) {
			if !d.Allowed {
				t.Fatalf("round %d entry %d denied: %s", round, i, limitertest.Describe(d))
			}
		}
		n := w.take("")
		checkWrites(t, fmt.Sprintf("batch send %d", round+1), n, want)
		if want == WriteNative && (n[wantKind] != 3 || n["commit"] != 0 || n["round trips"] != 2) {
			t.Errorf("batch send %d: %v; want 3 %s (one a recipient), no commit.lua, in 2 round trips", round+1, n, wantKind)
		}
		if want == WriteScript && (n["commit"] != 1 || n["round trips"] != 2) {
			t.Errorf("batch send %d: %v; want one commit.lua in 2 round trips", round+1, n)
		}
	}
	limitertest.MustDecide(t, s, limitertest.Req(at.Add(2*time.Second), limitertest.Vals{"recipient": "b"}, rule))
	checkWrites(t, "single send", w.take(""), want)
	// Two round trips whatever the batch's size.
	var big []limiter.Request
	for i := 0; i < 3000; i++ {
		big = append(big, *limitertest.Req(at, limitertest.Vals{"recipient": "big" + strconv.Itoa(i%1500)}, rule))
	}
	limitertest.MustBatch(t, s, big, limiter.BatchEach)
	if n := w.take(""); n["round trips"] != 2 || (want == WriteNative && n["set nx"] != 1500) {
		t.Errorf("a batch send of 3,000 entries over 1,500 recipients: %v; want 2 round trips (and on the native path 1,500 SET … NX)", n)
	}
	for _, who := range []string{"a", "b", "c"} {
		want := map[string]int64{"a": 4, "b": 3, "c": 2}[who]
		if u := limitertest.MustUsage(t, s, limitertest.Req(at.Add(3*time.Second), limitertest.Vals{"recipient": who}, rule)); u.Results[0].Used != want {
			t.Errorf("%s counts %d, want %d", who, u.Results[0].Used, want)
		}
	}

	paths := s.WritePaths()
	if len(paths) != 1 || paths[0].Path != want || paths[0].Node != c.Options().Addr {
		t.Fatalf("WritePaths = %+v; want %s for %s", paths, want, c.Options().Addr)
	}
	mu.Lock()
	if len(told) != 1 || told[0].Path != want {
		t.Errorf("OnWritePath was told %+v; want %s once", told, want)
	}
	mu.Unlock()
	t.Logf("%s: %s (%s)", paths[0].Node, paths[0].Path, paths[0].Reason)

	off := New(c, Options{Timeout: 5 * time.Second, GoBatchMin: 1, NoNativeWrite: true, Prefix: "off:"})
	defer off.Close()
	limitertest.MustBatch(t, off, batch(at), limiter.BatchEach)
	if n := w.take(""); n["commit"] != 1 || n["set ifeq"]+n["set nx"] != 0 {
		t.Errorf("NoNativeWrite sent %v; want one commit.lua", n)
	}
	if p := off.WritePaths(); len(p) != 1 || p[0].Path != WriteScript || !strings.Contains(p[0].Reason, "NoNativeWrite") {
		t.Errorf("NoNativeWrite: WritePaths = %+v; want script, saying why", p)
	}
}

// On the native path a key another gateway writes between a batch's read
// and its write is caught by that key's SET … IFEQ (or SET … NX for a key
// that did not exist), and only the entries on it are decided again, in
// the script: here two recipients of ten, one known and one new, changed
// by another gateway; the other eight are written by their own SET. Every
// count is exact, both keys turn hot, and a single send is caught alike.
func TestNativeConflictCaughtPerKey(t *testing.T) {
	c := redistest.Client(t)
	if expectedPath(t, c, "freqcap-test:ifeq-probe", true) != WriteNative {
		t.Skip("the server has no SET IFEQ: its conflicts go through commit.lua (TestBatchConflictRedecidesOnlyItsComponent)")
	}
	rule := &limiter.Rule{Name: "hour", By: []string{"recipient"}, Limit: 100, Window: limiter.Window{Duration: time.Hour}}
	at := limitertest.MustParse(t, "2026-05-01T10:00:00Z")
	const prefix = "native-conflict:"
	s := New(c, Options{Timeout: 5 * time.Second, Prefix: prefix, GoBatchMin: 1})
	defer s.Close()
	oc := redis.NewClient(c.Options())
	defer oc.Close()
	other := New(oc, Options{Timeout: 5 * time.Second, Prefix: prefix, ScriptOnly: true})
	defer other.Close()
	limitertest.MustDecide(t, other, limitertest.Req(at, limitertest.Vals{"recipient": "r3"}, rule)) // r3 exists at the read, r7 not
	if err := freqcapScript.Load(context.Background(), c).Err(); err != nil {
		t.Fatal(err)
	}
	sent := &sentCommands{}
	c.AddHook(sent)
	w := &writeCounter{}
	c.AddHook(w)
	c.AddHook(&beforeCommit{f: func() {
		limitertest.MustDecide(t, other, limitertest.Req(at, limitertest.Vals{"recipient": "r3"}, rule))
		limitertest.MustDecide(t, other, limitertest.Req(at, limitertest.Vals{"recipient": "r7"}, rule))
	}})

	var reqs []limiter.Request
	for i := 0; i < 10; i++ {
		reqs = append(reqs, *limitertest.Req(at, limitertest.Vals{"recipient": "r" + strconv.Itoa(i)}, rule))
	}
	reqs = append(reqs, *limitertest.Req(at, limitertest.Vals{"recipient": "r3"}, rule)) // r3 twice
	for i, d := range limitertest.MustBatch(t, s, reqs, limiter.BatchEach) {
		if !d.Allowed {
			t.Fatalf("entry %d denied under a limit of 100: %s", i, limitertest.Describe(d))
		}
	}
	n := w.take("")
	if n["set ifeq"] != 1 || n["set nx"] != 9 || n["commit"] != 0 {
		t.Errorf("the write sent %v; want SET … IFEQ for r3 and SET … NX for the nine new keys, no commit.lua", n)
	}
	if got := s.Conflicts(); got != 1 {
		t.Errorf("conflicts = %d, want 1 (one batch)", got)
	}
	sent.mu.Lock()
	scriptKeys := sent.scriptKeys
	sent.mu.Unlock()
	if len(scriptKeys) != 1 || scriptKeys[0] != 2 {
		t.Errorf("script runs with %v keys; want one with r3's and r7's", scriptKeys)
	}
	for _, who := range []string{"r3", "r7"} {
		s.hot.mu.Lock()
		_, hot := s.hot.until[limiter.KeyFor(prefix, "recipient", who)]
		s.hot.mu.Unlock()
		if !hot {
			t.Errorf("%s's key is not hot after its conflict", who)
		}
	}
	for i := 0; i < 10; i++ {
		want := map[int]int64{3: 4, 7: 2}[i] // r3: before, the other's, the batch's two; r7: the other's and the batch's
		if want == 0 {
			want = 1
		}
		if u := limitertest.MustUsage(t, s, limitertest.Req(at, limitertest.Vals{"recipient": "r" + strconv.Itoa(i)}, rule)); u.Results[0].Used != want {
			t.Errorf("r%d counts %d, want %d", i, u.Results[0].Used, want)
		}
	}

	// A single send, decided in Go, is caught alike.
	single := New(c, Options{Timeout: 5 * time.Second, Prefix: prefix, GoBatchMin: 1})
	defer single.Close()
	c.AddHook(&beforeCommit{f: func() {
		limitertest.MustDecide(t, other, limitertest.Req(at, limitertest.Vals{"recipient": "solo"}, rule))
	}})
	limitertest.MustDecide(t, other, limitertest.Req(at, limitertest.Vals{"recipient": "solo"}, rule))
	if d := limitertest.MustDecide(t, single, limitertest.Req(at, limitertest.Vals{"recipient": "solo"}, rule)); !d.Allowed || d.Results[0].Used != 3 {
		t.Fatalf("the single send: %s; want admitted, counting the other gateway's two and its own", limitertest.Describe(d))
	}
	if n := w.take(""); n["set ifeq"] != 1 || single.Conflicts() != 1 {
		t.Errorf("the single send sent %v with %d conflicts; want one SET … IFEQ, refused", n, single.Conflicts())
	}
}

// A node taken for native that refuses SET … IFEQ as a syntax error (a
// failover to a replica of an older build) wrote nothing: the store puts
// it on the script path at once, says so, and decides the batch again in
// the script, counting it once. Run against a server without IFEQ.
func TestNativeRefusedNodeGoesToTheScript(t *testing.T) {
	c := redistest.Client(t)
	if expectedPath(t, c, "freqcap-test:ifeq-probe", true) == WriteNative {
		t.Skip("the server has SET IFEQ: a refusal needs one without it")
	}
	var told []NodeWritePath
	var mu sync.Mutex
	s := New(c, Options{Timeout: 5 * time.Second, GoBatchMin: 1, OnWritePath: func(p NodeWritePath) {
		mu.Lock()
		told = append(told, p)
		mu.Unlock()
	}})
	defer s.Close()
	rule := &limiter.Rule{Name: "hour", By: []string{"recipient"}, Limit: 10, Window: limiter.Window{Duration: time.Hour}}
	at := limitertest.MustParse(t, "2026-05-01T10:00:00Z")
	// The keys exist: SET … NX, for a new key, runs on every server.
	limitertest.MustDecide(t, s, limitertest.Req(at, limitertest.Vals{"recipient": "x"}, rule))
	limitertest.MustDecide(t, s, limitertest.Req(at, limitertest.Vals{"recipient": "y"}, rule))
	// As if the node had answered IFEQ an instant ago, before a failover.
	s.caps.mu.Lock()
	s.caps.nodes[s.node] = &nodePath{NodeWritePath: NodeWritePath{Node: s.node, Path: WriteNative}, next: time.Now().Add(time.Hour)}
	s.caps.mu.Unlock()
	mu.Lock()
	told = nil
	mu.Unlock()
	reqs := []limiter.Request{*limitertest.Req(at, limitertest.Vals{"recipient": "x"}, rule), *limitertest.Req(at, limitertest.Vals{"recipient": "y"}, rule), *limitertest.Req(at, limitertest.Vals{"recipient": "x"}, rule)}
	for i, d := range limitertest.MustBatch(t, s, reqs, limiter.BatchEach) {
		if !d.Allowed || !d.Recorded() {
			t.Fatalf("entry %d: %s; want admitted and recorded", i, limitertest.Describe(d))
		}
	}
	for who, want := range map[string]int64{"x": 3, "y": 2} {
		if u := limitertest.MustUsage(t, s, limitertest.Req(at, limitertest.Vals{"recipient": who}, rule)); u.Results[0].Used != want {
			t.Errorf("%s counts %d, want %d", who, u.Results[0].Used, want)
		}
	}
	if p := s.WritePaths(); len(p) != 1 || p[0].Path != WriteScript || !strings.Contains(p[0].Reason, "syntax") {
		t.Errorf("WritePaths = %+v; want script, naming the refusal", p)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(told) != 1 || told[0].Path != WriteScript {
		t.Errorf("OnWritePath was told %+v; want script once", told)
	}
	if s.Conflicts() != 0 {
		t.Errorf("conflicts = %d: a refused syntax is not a changed key", s.Conflicts())
	}
}

// A node is asked again once its answer is a minute old, in the
// background, so an upgrade in place (or a failover to a newer build) is
// followed without a restart: here a node last found on the script path
// is found native, and OnWritePath says so. Run against a server with
// IFEQ.
func TestWritePathFollowsAnUpgrade(t *testing.T) {
	c := redistest.Client(t)
	if expectedPath(t, c, "freqcap-test:ifeq-probe", true) != WriteNative {
		t.Skip("the server has no SET IFEQ: there is nothing to upgrade to")
	}
	changed := make(chan NodeWritePath, 4)
	s := New(c, Options{Timeout: 5 * time.Second, GoBatchMin: 1, OnWritePath: func(p NodeWritePath) { changed <- p }})
	defer s.Close()
	s.caps.mu.Lock()
	s.caps.nodes[s.node] = &nodePath{NodeWritePath: NodeWritePath{Node: s.node, Path: WriteScript}, next: time.Now().Add(-time.Second)}
	s.caps.mu.Unlock()
	rule := &limiter.Rule{Name: "hour", By: []string{"recipient"}, Limit: 10, Window: limiter.Window{Duration: time.Hour}}
	at := limitertest.MustParse(t, "2026-05-01T10:00:00Z")
	limitertest.MustDecide(t, s, limitertest.Req(at, limitertest.Vals{"recipient": "u"}, rule)) // written by commit.lua, and asks again
	select {
	case p := <-changed:
		if p.Path != WriteNative {
			t.Fatalf("OnWritePath was told %+v; want native", p)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the node was not asked again")
	}
	if d := limitertest.MustDecide(t, s, limitertest.Req(at, limitertest.Vals{"recipient": "u"}, rule)); d.Results[0].Used != 2 {
		t.Fatalf("after the upgrade: %s; want 2 counted", limitertest.Describe(d))
	}
}

// recipientRules keeps the rules whose first dimension is the recipient:
// their logs share the recipient's key, so a decision reads one key.
func recipientRules(rules []*limiter.Rule) []*limiter.Rule {
	var out []*limiter.Rule
	for _, r := range rules {
		if r.By[0] == "recipient" {
			out = append(out, r)
		}
	}
	return out
}

// notRunHere knows a node's refusal both as go-redis returns it and as
// classify wraps it (a write's error is classified when it is read): a
// CLUSTERDOWN taken for a failure failed a batch that the script, on a
// reloaded slot map, would have decided. NOPERM is known as go-redis
// returns it (classify makes it ErrNoPermission, a failure). A script's
// own error is neither.
func TestNotRunHereSeesThroughClassify(t *testing.T) {
	for _, msg := range []string{"CLUSTERDOWN Hash slot not served", "MOVED 11097 127.0.0.1:7001", "ASK 11097 127.0.0.1:7001", "TRYAGAIN Multiple keys request during rehashing of slot", "READONLY You can't write against a read only replica.", "LOADING Redis is loading the dataset in memory"} {
		if err := serverErr(msg); !notRunHere(err) || !notRunHere(classify(err)) {
			t.Errorf("%q: not run here %v, classified %v; want both", msg, notRunHere(err), notRunHere(classify(err)))
		}
	}
	if !notRunHere(serverErr("NOPERM this user has no permissions to run the 'evalsha' command")) {
		t.Errorf("NOPERM not known")
	}
	if err := serverErr("ERR user_script:1: boom script: 1"); notRunHere(err) || notRunHere(classify(err)) {
		t.Errorf("a script's error taken for a refusal")
	}
}
