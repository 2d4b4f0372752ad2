package caddymodule_test

import (
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"
)

// limitsSite caps each Expo recipient 5 a minute, with extra lines.
func limitsSite(name, upstream string, extra ...string) string {
	return fmt.Sprintf(`
	frequency_cap /push/send* {
		name %s
		key_prefix %s
		%s
		dimension recipient {json.*.to}
		rule minute {
			by     recipient
			limit  5
			window 1m
		}
	}
	reverse_proxy %s`, name, testPrefix(), strings.Join(extra, "\n\t\t"), upstream)
}

// TestBatchMaxBatch proves max_batch: a batch of max_batch entries
// passes, one more is answered 413 with a JSON reason naming max_batch,
// before anything is decided (nothing recorded).
func TestBatchMaxBatch(t *testing.T) {
	up := startUpstream(t)
	name := batchName()
	g := startGateway(t, limitsSite(name, up.addr(), "max_batch 3"))
	expectStatus(t, g.post("/push/send", "application/json", `[{"to":"a"},{"to":["b","c"]}]`), http.StatusOK)
	f := expectFailure(t, g.post("/push/send", "application/json", `[{"to":"a"},{"to":["b","c","d"]}]`), http.StatusRequestEntityTooLarge, "max_batch (3)")
	if f.Dimension != "recipient" {
		t.Errorf("413 names %q", f.Dimension)
	}
	expectUsage(t, usageOf(t, name, "recipient=a"), map[string][2]int64{"minute": {1, 4}})
}

// TestBatchHostile proves that hostile batch bodies cost little: 100,000
// entries within max_body are answered 413 at once, reading no more than
// max_batch+1 of them (the allocations stay a small multiple of the
// body); a body over max_body is 413 before any of it is read as a batch;
// JSON nested 100,000 deep is 400; and recipients of 10 KB each are
// decided like any other (the engine hashes long values).
func TestBatchHostile(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, limitsSite(batchName(), up.addr(), "max_body 4MiB"))

	var b strings.Builder
	b.WriteString("[")
	for i := range 100_000 {
		if i > 0 {
			b.WriteString(",")
		}
		fmt.Fprintf(&b, `{"to":"r%d"}`, i)
	}
	b.WriteString("]")
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	start := time.Now()
	expectFailure(t, g.post("/push/send", "application/json", b.String()), http.StatusRequestEntityTooLarge, "max_batch (1000)")
	took := time.Since(start)
	runtime.ReadMemStats(&after)
	if took > 2*time.Second {
		t.Errorf("100k entries took %v to refuse", took)
	}
	// The client's copy of the body, the gateway's, and the test's
	// strings: a few body lengths, not a value per entry.
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 16*uint64(b.Len()) {
		t.Errorf("refusing a %d-byte batch allocated %d bytes", b.Len(), grew)
	}

	// About 2,000 entries in 32 KB, over max_body: refused for its size,
	// not its entries. (Small enough that the client has sent it all when
	// the answer comes.)
	g.load(limitsSite(batchName(), up.addr(), "max_body 16KiB"))
	expectFailure(t, g.post("/push/send", "application/json", b.String()[:b.Len()/50]+`"}]`), http.StatusRequestEntityTooLarge, "max_body")

	deep := `[{"to":"a","x":` + strings.Repeat("[", 100_000) + strings.Repeat("]", 100_000) + `}]`
	g.load(limitsSite(batchName(), up.addr(), "max_body 1MiB"))
	expectFailure(t, g.post("/push/send", "application/json", deep), http.StatusBadRequest, "not valid JSON")

	huge := `[{"to":"` + strings.Repeat("x", 10_000) + `"},{"to":"` + strings.Repeat("y", 10_000) + `"}]`
	for range 5 {
		expectStatus(t, g.post("/push/send", "application/json", huge), http.StatusOK)
	}
	expectStatus(t, g.post("/push/send", "application/json", huge), http.StatusTooManyRequests)
	if up.count() != 5 {
		t.Errorf("upstream got %d, want 5", up.count())
	}
}

// TestBatchRefund proves refund_on with a batch: a batch answered 502
// gives back the quota of every admitted entry, one answered 200 keeps
// it, on both stores.
func TestBatchRefund(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startUpstream(t)
		name := batchName()
		g := startGateway(t, limitsSite(name, up.addr(), strictStore(redisLine), "refund_on 5xx", "batch drop"))
		// Use up one of c's five first, so that c is not refunded more
		// than it was admitted.
		expectStatus(t, g.post("/push/send", "application/json", `[{"to":"c"}]`), http.StatusOK)
		for range 4 {
			expectStatus(t, g.post("/push/send", "application/json", `[{"to":"c"}]`), http.StatusOK)
		}
		a := g.post("/push/send", "application/json", `[{"to":["a","b"]},{"to":"c"}]`, "X-Want-Status: 502")
		expectStatus(t, a, http.StatusBadGateway)
		if d := dropped(t, a); len(d) != 1 || d[0] != "1.to" {
			t.Errorf("dropped %v", d)
		}
		for _, r := range []string{"a", "b"} {
			expectUsage(t, usageOf(t, name, "recipient="+r), map[string][2]int64{"minute": {0, 5}})
		}
		expectUsage(t, usageOf(t, name, "recipient=c"), map[string][2]int64{"minute": {5, 0}})
		expectStatus(t, g.post("/push/send", "application/json", `[{"to":["a","b"]}]`), http.StatusOK)
		for _, r := range []string{"a", "b"} {
			expectUsage(t, usageOf(t, name, "recipient="+r), map[string][2]int64{"minute": {1, 4}})
		}
	})
}

// TestBatchDryRun proves dry_run with a batch: nothing is refused or
// dropped (the upstream receives all 7 entries), each admitted entry is
// recorded (as single dry-run sends are: BatchEach), and the 2 would-be
// denials are counted as dry_run_deny.
func TestBatchDryRun(t *testing.T) {
	up := startUpstream(t)
	name := batchName()
	g := startGateway(t, limitsSite(name, up.addr(), "dry_run", "batch drop"))
	count := func() float64 {
		s, _ := scrape(t)
		return s[fmt.Sprintf(`caddy_frequency_cap_decisions_total{handler=%q,outcome="dry_run_deny",rule="minute"}`, name)]
	}
	before := count()
	body := `[{"to":["a","a","a","a"]},{"to":"a"},{"to":"a"},{"to":"a"}]`
	a := g.post("/push/send", "application/json", body)
	expectStatus(t, a, http.StatusOK)
	if a.header.Get("Frequency-Cap-Dropped") != "" || string(up.last().body) != body {
		t.Errorf("dry run changed the batch: dropped %q, upstream got %s", a.header.Get("Frequency-Cap-Dropped"), up.last().body)
	}
	if got := count() - before; got != 2 {
		t.Errorf("dry_run_deny rose by %v, want 2", got)
	}
	expectUsage(t, usageOf(t, name, "recipient=a"), map[string][2]int64{"minute": {5, 0}})
}

// TestBatchStoreDown proves on_error with a batch on an unreachable
// Redis: allow passes the batch on unchanged, deny answers 503, local
// decides it in the local store (the sixth entry for one recipient over
// a limit of 5 is dropped).
func TestBatchStoreDown(t *testing.T) {
	up := startUpstream(t)
	down := fmt.Sprintf("redis redis://127.0.0.1:%d/0", freePort(t))
	g := startGateway(t, limitsSite(batchName(), up.addr(), down, "batch drop"))
	body := `[{"to":["a","b"]},{"to":"c"}]`
	expectStatus(t, g.post("/push/send", "application/json", body), http.StatusOK)
	if string(up.last().body) != body {
		t.Errorf("upstream got %s", up.last().body)
	}
	g.load(limitsSite(batchName(), up.addr(), down, "on_error deny"))
	expectFailure(t, g.post("/push/send", "application/json", body), http.StatusServiceUnavailable, "unavailable")

	g.load(limitsSite(batchName(), up.addr(), down, "on_error local", "batch drop"))
	a := g.post("/push/send", "application/json", `[{"to":["a","a","a","a","a","a"]}]`)
	expectStatus(t, a, http.StatusOK)
	if d := dropped(t, a); len(d) != 1 || d[0] != "0.to.5" {
		t.Errorf("decided locally, dropped %v, want [0.to.5]", d)
	}
}
