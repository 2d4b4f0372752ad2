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

// TestRefusedBatchQuotaIsWhatIsThere proves that the quota fields of a
// batch refused under reject say what is recorded: none of its entries
// was, so a send the fields say fits passes. A probe's batch of 30, 50
// and 30 under a budget of 100 was told 20 remained (the store decided
// the third entry after the first two), and a send of 50 then passed.
func TestRefusedBatchQuotaIsWhatIsThere(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, capBlock("/b", "", "dimension user {json.*.to}",
		"rule budget {\n\t\t\tby user\n\t\t\tlimit 100\n\t\t\twindow 1h\n\t\t\tcost {json.*.amount}\n\t\t}")+
		"\treverse_proxy "+up.addr())
	a := g.post("/b", "application/json", `[{"to":"u","amount":30},{"to":"u","amount":50},{"to":"u","amount":30}]`)
	expectStatus(t, a, http.StatusTooManyRequests)
	p := a.batchDenial(t)
	if rl := a.header.Get("RateLimit"); rl != `"budget";r=100;t=0` || a.header.Get("X-RateLimit-Remaining") != "100" {
		t.Errorf("RateLimit %q, X-RateLimit-Remaining %q; want 100 left, as nothing was recorded", rl, a.header.Get("X-RateLimit-Remaining"))
	}
	if len(p.Violated) != 1 || p.Violated[0].Remaining != 100 || p.Violated[0].Used != 0 || !strings.Contains(p.Detail, "this batch asks 110 of it") {
		t.Errorf("the denial: %q, violated %+v; want 0 used, 100 remaining, and the batch's 110 asked", p.Detail, p.Violated)
	}
	expectStatus(t, g.post("/b", "application/json", `[{"to":"u","amount":50}]`), http.StatusOK)
	// 50 recorded, then 30 and 30: the second is refused; 50 remain.
	a = g.post("/b", "application/json", `[{"to":"u","amount":30},{"to":"u","amount":30}]`)
	expectStatus(t, a, http.StatusTooManyRequests)
	if a.header.Get("X-RateLimit-Remaining") != "50" {
		t.Errorf("after 50 recorded: X-RateLimit-Remaining %q, want 50", a.header.Get("X-RateLimit-Remaining"))
	}
}
