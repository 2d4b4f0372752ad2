package caddymodule

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// TestRequestAfterCleanupIsDecided proves that a request still in the
// old handler when a reload cleans it up is decided, not a panic: Caddy
// does not wait for the old config's requests, and Cleanup set the
// handler's store to nil under them (a probe saw a nil pointer panic in
// decide, a few a run of 20 reloads under 64 senders). The memory store
// here is closed by the cleanup (parking is off in these tests) and
// decides all the same.
func TestRequestAfterCleanupIsDecided(t *testing.T) {
	h := memoryCapSet(t, "cleanup-inflight:")
	expectCode(t, serve(t, h, `{"to": "alice"}`).Code, http.StatusOK)
	if err := h.Cleanup(); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if code := serve(t, h, `{"to": "alice"}`).Code; code != http.StatusOK && code != http.StatusTooManyRequests {
			t.Fatalf("a request after Cleanup: status %d", code)
		}
	}
}

// TestCleanupWaitsForItsRequests proves that a handler cleaned up while it
// serves a request keeps its store until the request is done: a reload
// that changed the store's settings closed the old store under the old
// config's requests, which on_error allow then passed uncounted (a probe:
// 1,226 delivered under a limit of 1,200 with two gateways reloading).
// A request the old handler takes meanwhile is decided on its store; once
// the last is done, the store is given back.
func TestCleanupWaitsForItsRequests(t *testing.T) {
	h, err := load(t, fmt.Sprintf(`{"name": "drain", "redis": {"url": "redis://%s/0"}, "on_error": "allow", "key_prefix": "drain:",
		"dimensions": {"r": "{json.to}"}, "rules": [{"name": "once", "by": ["r"], "limit": 1, "window": "1m"}]}`, redistest.Start(t).Addr))
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	served := make(chan int)
	go func() {
		r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(`{"to": "ann"}`))
		r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, caddy.NewReplacer()))
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r, caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			<-release // the upstream answers after the cleanup
			w.WriteHeader(http.StatusOK)
			return nil
		}))
		served <- w.Code
	}()
	for h.serving.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	key := h.storeKey
	if err := h.Cleanup(); err != nil {
		t.Fatal(err)
	}
	// ann's send is recorded in Redis: her next is refused, not passed by
	// on_error allow as a closed store's would be.
	if code := serve(t, h, `{"to": "ann"}`).Code; code != http.StatusTooManyRequests {
		t.Errorf("a send during the drain: %d, want 429", code)
	}
	close(release)
	if code := <-served; code != http.StatusOK {
		t.Errorf("the request in flight: %d", code)
	}
	deadline := time.Now().Add(5 * time.Second)
	for pooled(key) != nil && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if pooled(key) != nil {
		t.Error("the store was not given back once the requests were done")
	}
}

// TestDrainBoundSaysWhatItLeaves proves that a store closed at the drain's
// bound with requests still in flight says so, with how many: their
// refunds fail, which a probe found logged only as a failing store.
func TestDrainBoundSaysWhatItLeaves(t *testing.T) {
	h, logs := observed(t, `{"name": "drained", "key_prefix": "drained:", "dimensions": {"r": "{json.to}"},
		"rules": [{"name": "r", "by": ["r"], "limit": 3, "window": "1m"}]}`, time.Hour)
	h.serving.Add(1)
	defer h.serving.Add(-1)
	h.releaseWhenServed(time.Now().Add(20 * time.Millisecond))
	lines := logs.FilterMessageSnippet("closed with requests still in flight").All()
	if len(lines) != 1 || lines[0].ContextMap()["requests"] != int64(1) {
		t.Errorf("lines %v; want one warning naming 1 request", logs.All())
	}
}
