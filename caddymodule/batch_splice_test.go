package caddymodule_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"testing"
)

// expoTicket is one ticket of Expo's answer, as spliced.
type expoTicket struct {
	Status  string `json:"status"`
	ID      string `json:"id"`
	Message string `json:"message"`
	Details *struct {
		Error      string `json:"error"`
		Rule       string `json:"rule"`
		RetryAfter int    `json:"retry_after"`
	} `json:"details"`
}

// spliceSite caps each Expo recipient once a minute, drops the capped
// ones and splices their tickets back.
func spliceSite(name, upstream string) string {
	return fmt.Sprintf(`
	frequency_cap /push/send* {
		name %s
		key_prefix %s
		batch drop
		splice expo
		dimension recipient {json.*.to}
		rule once {
			by     recipient
			limit  1
			window 1m
		}
	}
	reverse_proxy %s`, name, testPrefix(), upstream)
}

// TestBatchSpliceExpo proves splice expo: a sender sends 5 recipients of
// which 2 are capped; the upstream receives 3 and answers 3 tickets; the
// client gets 5 tickets in its own order, the MessageRateExceeded ones at
// the capped recipients' positions, with a correct Content-Length. An
// upstream 500, and an answer with the wrong number of tickets, are
// passed on unchanged and counted in splice_failures_total.
func TestBatchSpliceExpo(t *testing.T) {
	up := startExpo(t)
	name := batchName()
	g := startGateway(t, spliceSite(name, up.addr()))
	// Cap r1 and r3.
	expectStatus(t, g.post("/push/send", "application/json", `[{"to":["r1","r3"]}]`), http.StatusOK)

	body := `[{"to":"r0"},{"to":["r1","r2"]},{"to":"r3"},{"to":"r4"}]`
	a := g.post("/push/send", "application/json", body)
	expectStatus(t, a, http.StatusOK)
	if n, _ := strconv.Atoi(a.header.Get("Content-Length")); n != len(a.body) {
		t.Errorf("Content-Length %q for %d bytes", a.header.Get("Content-Length"), len(a.body))
	}
	var ans struct {
		Data []expoTicket `json:"data"`
	}
	if err := json.Unmarshal(a.body, &ans); err != nil {
		t.Fatalf("answer %s: %v", a.body, err)
	}
	if len(ans.Data) != 5 {
		t.Fatalf("answer has %d tickets, want 5: %s", len(ans.Data), a.body)
	}
	for i, tk := range ans.Data {
		capped := i == 1 || i == 3
		switch {
		case capped && (tk.Status != "error" || tk.Details == nil || tk.Details.Error != "MessageRateExceeded" || tk.Details.Rule != "once" || tk.Details.RetryAfter < 1):
			t.Errorf("ticket %d %+v, want MessageRateExceeded", i, tk)
		case !capped && (tk.Status != "ok" || tk.ID != "r"+strconv.Itoa(i)):
			t.Errorf("ticket %d %+v, want ok for r%d", i, tk, i)
		}
	}
	bodies := up.received()
	if got := string(bodies[len(bodies)-1]); got != `[{"to":"r0"},{"to":["r2"]},{"to":"r4"}]` {
		t.Errorf("upstream got %s", got)
	}

	failures := func() float64 {
		s, _ := scrape(t)
		return s[fmt.Sprintf(`caddy_frequency_cap_splice_failures_total{handler=%q}`, name)]
	}
	before := failures()
	for _, c := range []struct {
		to, header string
		status     int
		answer     string
	}{
		{"r5", "X-Want-Status: 500", http.StatusInternalServerError, `{"data":[{"status":"ok","id":"r5"}]}`},
		{"r6", "X-Want-Tickets: 2", http.StatusOK, `{"data":[{"status":"ok","id":"x"},{"status":"ok","id":"x"}]}`},
	} {
		a := g.post("/push/send", "application/json", `[{"to":["r1",`+strconv.Quote(c.to)+`]}]`, c.header)
		expectStatus(t, a, c.status)
		if string(a.body) != c.answer {
			t.Errorf("%s: answer %s, want the upstream's unchanged %s", c.header, a.body, c.answer)
		}
	}
	if got := failures() - before; got != 2 {
		t.Errorf("splice_failures_total rose by %v, want 2", got)
	}
}
