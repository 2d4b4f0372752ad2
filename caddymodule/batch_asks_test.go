package caddymodule_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestBatchAskingMoreThanALimit proves that a batch refused under reject
// because it asks one recipient's log for more than the rule's limit (four
// entries to x9 under a limit of 3) is told that no wait admits it: its
// own earlier entries were counted when the store decided, but never
// recorded, so no record's leaving frees them (a probe's batch was told to
// retry in 3601 s, and would have been refused again then). A batch that
// fits the limit but not what is already used gets the wait of the records
// that are there.
func TestBatchAskingMoreThanALimit(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, capBlock("/b", "", "dimension recipient {json.*.to}", ruleBlock("hour", "recipient", 3))+
		"\treverse_proxy "+up.addr())
	four := `[{"to":"x9"},{"to":"x9"},{"to":"x9"},{"to":"x9"}]`
	a := g.post("/b", "application/json", four)
	expectStatus(t, a, http.StatusTooManyRequests)
	if d := a.batchDenial(t).Detail; !strings.Contains(d, "rule hour allows 3 per 1m0s, and this batch asks 4 of it for one recipient: no wait admits it") {
		t.Errorf("four to x9 under a limit of 3: %q", d)
	}
	// Two used, then a batch of two: it fits the limit, and the wait is
	// the oldest record's.
	expectStatus(t, g.post("/b", "application/json", `[{"to":"y"},{"to":"y"}]`), http.StatusOK)
	a = g.post("/b", "application/json", `[{"to":"y"},{"to":"y"}]`)
	expectStatus(t, a, http.StatusTooManyRequests)
	if p := a.batchDenial(t); strings.Contains(p.Detail, "no wait") || p.RetryAfter < 1 || p.RetryAfter > 60 {
		t.Errorf("two more to y: %q, retry_after %d", p.Detail, p.RetryAfter)
	}
}
