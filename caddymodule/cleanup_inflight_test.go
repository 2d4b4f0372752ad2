package caddymodule

import (
	"net/http"
	"testing"
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
