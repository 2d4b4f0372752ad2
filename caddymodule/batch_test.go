package caddymodule_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// dropped parses Frequency-Cap-Dropped (a list of sf-strings) into paths.
func dropped(t *testing.T, a *answer) []string {
	t.Helper()
	h := a.header.Get("Frequency-Cap-Dropped")
	if h == "" {
		return nil
	}
	var out []string
	for item := range strings.SplitSeq(h, ", ") {
		s, err := strconv.Unquote(item)
		if err != nil {
			t.Fatalf("Frequency-Cap-Dropped %q: item %q is no sf-string", h, item)
		}
		out = append(out, s)
	}
	return out
}

// TestBatchSeedDrop proves, on both stores, the seed caps over an Expo
// batch under batch drop: 20 messages to one recipient (distinct bodies)
// admit 15; the upstream receives one request of exactly those 15
// messages, valid JSON with a correct Content-Length; the answer names
// the 5 dropped paths 15.to..19.to in Frequency-Cap-Dropped, and its
// quota headers describe the entry with the least left (recipient_minute
// at 0). The admin API shows 15 used.
func TestBatchSeedDrop(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startUpstream(t)
		name := batchName()
		g := startGateway(t, batchSeedSite(name, redisLine, up.addr(), "batch drop"))

		bodies := func(i int) string { return fmt.Sprintf("hello %d", i) }
		a := g.post("/push/send", "application/json", expoMessages(repeat("alice", 20), bodies))
		expectStatus(t, a, http.StatusOK)
		if want := numbered(15, 20, ".to"); !slices.Equal(dropped(t, a), want) {
			t.Errorf("Frequency-Cap-Dropped %q, want %q", a.header.Get("Frequency-Cap-Dropped"), want)
		}
		if up.count() != 1 {
			t.Fatalf("upstream got %d requests, want 1", up.count())
		}
		got := up.last()
		var msgs []map[string]any
		if err := json.Unmarshal(got.body, &msgs); err != nil {
			t.Fatalf("upstream body is not JSON: %v: %s", err, got.body)
		}
		if len(msgs) != 15 || msgs[0]["body"] != "hello 0" || msgs[14]["body"] != "hello 14" {
			t.Errorf("upstream got %d messages: %s", len(msgs), got.body)
		}
		if got.contentLength != int64(len(got.body)) {
			t.Errorf("upstream Content-Length %d for %d bytes", got.contentLength, len(got.body))
		}
		if rl := a.header.Get("RateLimit"); !strings.HasPrefix(rl, `"recipient_minute";r=0;t=`) || !strings.Contains(rl, `"recipient_day";r=35;`) {
			t.Errorf("RateLimit %q, want recipient_minute at 0 and recipient_day at 35", rl)
		}
		if a.header.Get("X-RateLimit-Remaining") != "0" {
			t.Errorf("X-RateLimit-Remaining %q", a.header.Get("X-RateLimit-Remaining"))
		}
		expectUsage(t, usageOf(t, name, "recipient=alice"), map[string][2]int64{"recipient_minute": {15, 0}, "recipient_day": {15, 35}})
	})
}

// TestBatchSeedReject proves, on both stores, that under batch reject
// (the default) the same 20 messages are refused whole: 429 with a
// problem naming recipient_minute, Retry-After, and each of the 5 denied
// entries by path and rule (no value without log_values); the upstream
// gets nothing, nothing is recorded for any entry (usage 0), and a
// following single-message batch is admitted with the full quota left.
func TestBatchSeedReject(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startUpstream(t)
		name := batchName()
		g := startGateway(t, batchSeedSite(name, redisLine, up.addr(), ""))

		bodies := func(i int) string { return fmt.Sprintf("hello %d", i) }
		a := g.post("/push/send", "application/json", expoMessages(repeat("alice", 20), bodies))
		expectStatus(t, a, http.StatusTooManyRequests)
		p := a.batchDenial(t)
		if p.Rule != "recipient_minute" || p.Limit != 15 || p.Status != 429 || !strings.HasPrefix(p.Detail, "5 of 20 entries denied") {
			t.Errorf("denial %s", a.body)
		}
		if want := numbered(15, 20, ".to"); !slices.Equal(p.deniedPaths(), want) {
			t.Errorf("denied %v, want %v", p.deniedPaths(), want)
		}
		for _, e := range p.Denied {
			if e.Rule != "recipient_minute" || e.Value != "" || e.RetryAfter < 1 || e.RetryAfter > 60 {
				t.Errorf("denied entry %+v", e)
			}
		}
		if ra := a.header.Get("Retry-After"); ra != strconv.FormatInt(p.RetryAfter, 10) {
			t.Errorf("Retry-After %q, body %d", ra, p.RetryAfter)
		}
		if up.count() != 0 {
			t.Errorf("a refused batch reached the upstream")
		}
		expectUsage(t, usageOf(t, name, "recipient=alice"), map[string][2]int64{"recipient_minute": {0, 15}, "recipient_day": {0, 50}})

		one := g.post("/push/send", "application/json", expoMessages([]string{"alice"}, bodies))
		expectStatus(t, one, http.StatusOK)
		if rl := one.header.Get("RateLimit"); !strings.HasPrefix(rl, `"recipient_minute";r=14;`) {
			t.Errorf("RateLimit after a refused batch %q, want the full quota less one", rl)
		}
	})
}

// TestBatchDuplicates proves that entries for one recipient count one
// after another within a batch: the same content to the same recipient
// three times in one batch has its third copy denied by same_content, as
// a third single send would be; under drop the first two are passed on.
func TestBatchDuplicates(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, batchSeedSite(batchName(), "", up.addr(), "batch drop"))
	same := func(int) string { return "same" }
	a := g.post("/push/send", "application/json", expoMessages(repeat("bob", 3), same))
	expectStatus(t, a, http.StatusOK)
	if d := dropped(t, a); !slices.Equal(d, []string{"2.to"}) {
		t.Errorf("dropped %v, want [2.to]", d)
	}
	var msgs []any
	if err := json.Unmarshal(up.last().body, &msgs); err != nil || len(msgs) != 2 {
		t.Errorf("upstream got %s", up.last().body)
	}

	g2 := startGateway(t, batchSeedSite(batchName(), "", up.addr(), "batch reject"))
	r := g2.post("/push/send", "application/json", expoMessages(repeat("bob", 3), same))
	expectStatus(t, r, http.StatusTooManyRequests)
	p := r.batchDenial(t)
	if len(p.Denied) != 1 || p.Denied[0].Path != "2.to" || p.Denied[0].Rule != "same_content" || p.Rule != "same_content" {
		t.Errorf("denial %s", r.body)
	}
}

// TestBatchExpoToForms proves that {json.*.to} reads both of Expo's
// forms (a string, an array) in one batch, and that drop removes a
// capped recipient from its message's array, removes a message whose only
// recipient is capped, keeps the rest byte for byte; and that a batch
// whose every entry is capped is answered 429 as under reject. The batch
// metrics count the entries per request and the dropped entries.
func TestBatchExpoToForms(t *testing.T) {
	up := startUpstream(t)
	name := batchName()
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap /push/send* {
		name %s
		key_prefix %s
		batch drop
		dimension recipient {json.*.to}
		rule once {
			by     recipient
			limit  1
			window 1m
		}
	}
	reverse_proxy %s`, name, testPrefix(), up.addr()))
	// Use up a's and c's quota.
	expectStatus(t, g.post("/push/send", "application/json", `[{"to":["a","c"],"body":"x"}]`), http.StatusOK)

	body := `[{"to": ["a", "b"], "body": "one"}, {"to": "c", "body": "two"}, {"to": "d", "body": "three"}]`
	a := g.post("/push/send", "application/json", body)
	expectStatus(t, a, http.StatusOK)
	if d := dropped(t, a); !slices.Equal(d, []string{"0.to.0", "1.to"}) {
		t.Errorf("dropped %v, want [0.to.0 1.to]", d)
	}
	if got, want := string(up.last().body), `[{"to": ["b"], "body": "one"}, {"to": "d", "body": "three"}]`; got != want {
		t.Errorf("upstream got\n%s\nwant\n%s", got, want)
	}

	none := g.post("/push/send", "application/json", `[{"to": ["a", "b"]}, {"to": "d"}]`)
	expectStatus(t, none, http.StatusTooManyRequests)
	if p := none.batchDenial(t); len(p.Denied) != 3 {
		t.Errorf("denied %v, want all 3", p.deniedPaths())
	}
	if up.count() != 2 {
		t.Errorf("upstream got %d requests, want 2", up.count())
	}
	// Three batches of 2, 4 and 3 entries; 2 entries dropped (those of the
	// refused batch were not: it was not passed on).
	m, _ := scrape(t)
	for series, want := range map[string]float64{
		`caddy_frequency_cap_batch_dropped_total{handler="%s"}`: 2,
		`caddy_frequency_cap_batch_entries_count{handler="%s"}`: 3,
		`caddy_frequency_cap_batch_entries_sum{handler="%s"}`:   9,
	} {
		if got := m[fmt.Sprintf(series, name)]; got != want {
			t.Errorf(series+": %v, want %v", name, got, want)
		}
	}
}

// TestBatchMissing proves on_missing per entry: under reject a message
// without a recipient, or a recipient without a per-entry content, is a
// 400 naming the dimension and the entry's path; under skip a message
// without a recipient is no entry, and an entry without content is
// capped by its recipient's rules alone.
func TestBatchMissing(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, batchSeedSite(batchName(), "", up.addr(), ""))
	f := expectFailure(t, g.post("/push/send", "application/json", `[{"to":"a","body":"x"},{"body":"y"}]`), http.StatusBadRequest, "at 1.to")
	if f.Dimension != "recipient" {
		t.Errorf("failure names %q, want recipient", f.Dimension)
	}
	f = expectFailure(t, g.post("/push/send", "application/json", `[{"to":"a","body":"x"},{"to":"b"}]`), http.StatusBadRequest, "at 1.to")
	if f.Dimension != "content" {
		t.Errorf("failure names %q, want content", f.Dimension)
	}

	name := batchName()
	g.load(batchSeedSite(name, "", up.addr(), "on_missing skip"))
	a := g.post("/push/send", "application/json", `[{"to":"a","body":"x"},{"body":"y"},{"to":"b"}]`)
	expectStatus(t, a, http.StatusOK)
	expectUsage(t, usageOf(t, name, "recipient=b"), map[string][2]int64{"recipient_minute": {1, 14}, "recipient_day": {1, 49}})
	expectUsage(t, usageOf(t, name, "recipient=a&content=x"), map[string][2]int64{"recipient_minute": {1, 14}, "recipient_day": {1, 49}, "same_content": {1, 1}})
}
