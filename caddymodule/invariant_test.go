package caddymodule

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// invariantDuration is how long the senders of TestManyGatewaysOneTruth
// send on each store. FREQCAP_INVARIANT_DURATION overrides it, e.g.
//
//	FREQCAP_INVARIANT_DURATION=30s go test -race -run TestManyGatewaysOneTruth -v ./caddymodule
const invariantDuration = 10 * time.Second

// invariantSenders is how many senders send at once, spread over the
// gateways.
const invariantSenders = 200

// invRule is a rule as the invariant checker knows it.
type invRule struct {
	name      string
	byContent bool // by recipient and content, else by recipient
	limit     int
	window    time.Duration
}

// invSet is one frequency_cap handler of the invariant test, on its own
// path and key prefix.
type invSet struct {
	name, path string
	rules      []invRule
	recipients int
}

// The gateways serve two cap sets. seed is the seed config of DESIGN §1.
// Its windows (59 s and longer) outlast a run, so for it "any window" is
// the whole run and the sliding check reduces to totals; fast has the same
// four shapes (recipient short and long, same content short and long) with
// windows of seconds and limits chosen so that every rule gets to deny, and
// a run spans many windows: there the sliding check and its clock
// tolerance are exercised.
var invSets = []invSet{
	{name: "seed", path: "/v1/send", recipients: 12, rules: []invRule{
		{"recipient_minute", false, 15, time.Minute},
		{"recipient_day", false, 50, 24 * time.Hour},
		{"same_content_59s", true, 2, 59 * time.Second},
		{"same_content_59m", true, 5, 59 * time.Minute},
	}},
	{name: "fast", path: "/v1/fast", recipients: 6, rules: []invRule{
		{"recipient_5s", false, 15, 5 * time.Second},
		{"recipient_20s", false, 25, 20 * time.Second},
		{"same_content_2s", true, 2, 2 * time.Second},
		{"same_content_10s", true, 3, 10 * time.Second},
	}},
}

// invColdContents is how many contents besides the hot one a sender
// picks from: half the messages carry the hot content, so the same-content
// rules deny, and the rest spread wide enough that the recipient rules do.
const invColdContents = 20

// TestManyGatewaysOneTruth runs 3 Caddy processes on one store, first a
// standalone Redis, then a 3-master Redis Cluster, with 200 senders spread
// over them for invariantDuration on a few recipients, and proves from
// what a mock upstream received that no rule ever admitted more than its
// limit in any window, and that every 429 named a rule that was really at
// its limit. See checkInvariants for the clock tolerance.
func TestManyGatewaysOneTruth(t *testing.T) {
	d := invariantDuration
	if s := os.Getenv("FREQCAP_INVARIANT_DURATION"); s != "" {
		var err error
		if d, err = time.ParseDuration(s); err != nil || d <= 0 {
			t.Fatalf("FREQCAP_INVARIANT_DURATION=%q is not a positive duration", s)
		}
	}
	bin := caddyBinary(t)
	if caddyBuild.took > 0 {
		t.Logf("built Caddy (race detector: %v) in %s", raceBuild, caddyBuild.took.Round(time.Millisecond))
	}
	t.Run("standalone", func(t *testing.T) {
		srv := redistest.Start(t)
		rc := redis.NewClient(&redis.Options{Addr: srv.Addr})
		t.Cleanup(func() { rc.Close() })
		runInvariant(t, bin, "address "+srv.Addr, rc, d)
	})
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t, 3, 0)
		runInvariant(t, bin, "address "+strings.Join(c.Addrs(), " ")+"\n\t\t\tcluster", c.Nodes[0].Admin(), d)
	})
}

// delivery is a message the upstream received.
type delivery struct {
	set         string
	to, content string
	sent, at    time.Time // the sender's send time, the upstream's receive time
}

// deliveries is a mock push provider that records every message with the
// time it arrived.
type deliveries struct {
	*httptest.Server
	mu  sync.Mutex
	got []delivery
}

func startDeliveries(t *testing.T) *deliveries {
	u := &deliveries{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		var msg struct{ To, Content string }
		b, _ := io.ReadAll(r.Body)
		if err := json.Unmarshal(b, &msg); err != nil {
			http.Error(w, "not JSON", http.StatusBadRequest)
			return
		}
		ns, _ := strconv.ParseInt(r.Header.Get("X-Sent-At"), 10, 64)
		u.mu.Lock()
		u.got = append(u.got, delivery{set: r.URL.Path, to: msg.To, content: msg.Content, sent: time.Unix(0, ns), at: at})
		u.mu.Unlock()
		w.Header().Set("X-Upstream", "push")
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, `{"status":"queued"}`)
	}))
	t.Cleanup(u.Close)
	return u
}

// outcome is what a sender saw of one message that was not admitted.
type outcome struct {
	set         string
	to, content string
	start, end  time.Time
	status      int    // 0: no answer
	what        string // the error, or the body of an unexpected answer
	rule        string // the denying rule of a 429
	violated    []violated
}

// invSite is the inside of a gateway's site block: both cap sets, with
// on_error deny so that a store failure can never admit a message (it is
// answered 503 and counted), in front of upstream.
func invSite(redisLines, prefix, upstream string) string {
	var b strings.Builder
	for _, s := range invSets {
		fmt.Fprintf(&b, `
	frequency_cap %s {
		name %s_%s
		redis {
			%s
			timeout 3s
		}
		key_prefix %s%s:
		on_error deny
		dimension recipient {json.to}
		dimension content   {json.content}
`, s.path, strings.TrimSuffix(prefix, ":"), s.name, redisLines, prefix, s.name)
		for _, r := range s.rules {
			by := "recipient"
			if r.byContent {
				by += " content"
			}
			fmt.Fprintf(&b, "\t\trule %s {\n\t\t\tby %s\n\t\t\tlimit %d\n\t\t\twindow %s\n\t\t}\n", r.name, by, r.limit, r.window)
		}
		b.WriteString("\t}\n")
	}
	fmt.Fprintf(&b, "\treverse_proxy %s\n", upstream)
	return b.String()
}

// runInvariant starts 3 gateways on the store that redisLines configure
// (rc is a client to it, for its clock), sends for d and checks what came
// out.
func runInvariant(t *testing.T, bin, redisLines string, rc *redis.Client, d time.Duration) {
	up := startDeliveries(t)
	prefix := testPrefix()
	site := invSite(redisLines, prefix, up.Listener.Addr().String())
	var gws []*caddyProcess
	for i := 0; i < 3; i++ {
		gws = append(gws, startCaddyProcess(t, bin, site))
	}
	offset := redisClockOffset(t, rc)

	tr := &http.Transport{MaxIdleConnsPerHost: invariantSenders, IdleConnTimeout: 30 * time.Second}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var sent, admitted atomic.Int64
	var mu sync.Mutex
	var others []outcome
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for w := 0; w < invariantSenders; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), uint64(start.UnixNano())))
			for time.Now().Before(deadline) {
				gw := gws[rng.IntN(len(gws))]
				set := &invSets[rng.IntN(len(invSets))]
				o := outcome{set: set.path, to: fmt.Sprintf("%s%d", set.name, rng.IntN(set.recipients)), content: "hot"}
				if rng.IntN(2) == 0 {
					o.content = fmt.Sprint("cold", rng.IntN(invColdContents))
				}
				body, _ := json.Marshal(map[string]string{"to": o.to, "content": o.content})
				req, _ := http.NewRequest(http.MethodPost, gw.url+set.path, bytes.NewReader(body))
				req.Header.Set("Content-Type", "application/json")
				o.start = time.Now()
				req.Header.Set("X-Sent-At", strconv.FormatInt(o.start.UnixNano(), 10))
				sent.Add(1)
				res, err := hc.Do(req)
				if err != nil {
					o.end, o.what = time.Now(), err.Error()
					mu.Lock()
					others = append(others, o)
					mu.Unlock()
					continue
				}
				b, err := io.ReadAll(res.Body)
				res.Body.Close()
				o.end, o.status = time.Now(), res.StatusCode
				switch {
				case err != nil:
					o.what = err.Error()
				case res.StatusCode == http.StatusOK && res.Header.Get("X-Upstream") == "push":
					admitted.Add(1)
					continue
				case res.StatusCode == http.StatusTooManyRequests:
					var p problem
					if err := json.Unmarshal(b, &p); err != nil {
						o.what = fmt.Sprintf("429 body %q: %v", b, err)
					}
					o.rule, o.violated = p.Rule, p.Violated
				default:
					o.what = string(b)
				}
				mu.Lock()
				others = append(others, o)
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	for _, gw := range gws {
		gw.healthy(t)
	}
	up.mu.Lock()
	got := append([]delivery(nil), up.got...)
	up.mu.Unlock()
	t.Logf("%d senders on 3 gateways for %s: %d sent (%.0f/s), %d admitted; Redis clock minus local clock: %s",
		invariantSenders, elapsed.Round(time.Millisecond), sent.Load(), float64(sent.Load())/elapsed.Seconds(), admitted.Load(), offset)
	if int64(len(got)) != admitted.Load() {
		t.Errorf("the upstream received %d messages, the senders saw %d admitted", len(got), admitted.Load())
	}
	checkInvariants(t, got, others, sent.Load())
}

// redisClockOffset measures Redis TIME against the local clock: the
// offset that puts Redis's answer in the middle of the round trip, from
// the fastest of a few rounds. The invariant checker compares only local
// times, so a constant offset does not matter; it is reported to show
// that the gateways and the upstream share the store's clock here.
func redisClockOffset(t *testing.T, rc *redis.Client) time.Duration {
	t.Helper()
	best, off := time.Hour, time.Duration(0)
	for i := 0; i < 10; i++ {
		t0 := time.Now()
		rt, err := rc.Time(context.Background()).Result()
		t1 := time.Now()
		if err != nil {
			t.Fatalf("TIME: %v", err)
		}
		if rtt := t1.Sub(t0); rtt < best {
			best, off = rtt, rt.Sub(t0.Add(rtt/2))
		}
	}
	return off.Round(time.Microsecond)
}

// span is when one message may have been decided: after it was sent, before
// it arrived (local clock).
type span struct{ sent, at time.Time }

// checkInvariants proves, from what the upstream received and what the
// senders saw, that
//
//   - no rule admitted more than its limit in any window: for no rule and
//     key (recipient, or recipient and content) did limit+1 messages all
//     leave their senders and reach the upstream within less than the
//     window; and
//   - every 429 was deserved: for every rule its body names as violated, at
//     least limit messages of that key may have been counted in its window
//     at the moment of the decision.
//
// Clock tolerance: the store decides a message by Redis's clock at some
// moment between its send time and its arrival at the upstream; the checker
// sees only those two, on the local clock (the offset to Redis's clock
// cancels out, as the engine compares Redis times with Redis times). So
// each message carries its own tolerance, its send-to-arrival time, which
// is measured and reported: a group of limit+1 messages is a certain
// over-admission when the latest arrival minus the earliest send is under
// the window, and a message may count for a 429 decided within [s, e] when
// it was sent by e and arrived after s-window-slack, where slack is limit
// ms (a record is stamped at its decision time or, when several land in
// one millisecond, up to one ms per record later).
//
// Requests that got neither 200 nor 429 (store timeouts answered 503 under
// on_error deny, transport errors) may have been recorded without being
// delivered: they count as possibly recorded in the 429 check. They take
// nothing from the proof, but a run where many fail proves little, so
// they must stay under 10% of the requests. (On an idle machine there are
// none; on one overloaded several times over, store calls have been seen
// to pass the 3 s timeout.)
func checkInvariants(t *testing.T, got []delivery, others []outcome, sent int64) {
	t.Helper()
	keyOf := func(r *invRule, to, content string) string {
		if r.byContent {
			return to + "\x00" + content
		}
		return to
	}
	setOf := func(path string) *invSet {
		for i := range invSets {
			if invSets[i].path == path {
				return &invSets[i]
			}
		}
		t.Fatalf("unknown path %q", path)
		return nil
	}
	type ruleKey struct{ set, rule, key string }
	// delivered and undelivered, by rule and key: the spans of messages
	// delivered, and of requests that failed (and may have been recorded).
	delivered := map[ruleKey][]span{}
	undelivered := map[ruleKey][]span{}
	lat := make([]time.Duration, 0, len(got))
	for _, d := range got {
		lat = append(lat, d.at.Sub(d.sent))
		s := setOf(d.set)
		for i := range s.rules {
			k := ruleKey{s.path, s.rules[i].name, keyOf(&s.rules[i], d.to, d.content)}
			delivered[k] = append(delivered[k], span{d.sent, d.at})
		}
	}
	// denied counts the rule a 429 names (the one that frees up last),
	// violated every rule it lists as refusing.
	denied, violatedBy := map[string]int{}, map[string]int{}
	var denials, unexplained int
	var failed []outcome
	for _, o := range others {
		if o.status == http.StatusTooManyRequests && o.what == "" {
			denials++
			denied[o.set+" "+o.rule]++
			continue
		}
		failed = append(failed, o)
		s := setOf(o.set)
		for i := range s.rules {
			k := ruleKey{s.path, s.rules[i].name, keyOf(&s.rules[i], o.to, o.content)}
			undelivered[k] = append(undelivered[k], span{o.start, o.end})
		}
	}
	if len(failed) > 0 {
		t.Logf("%d requests neither admitted nor denied, e.g. %d %q", len(failed), failed[0].status, tail([]byte(failed[0].what), 200))
	}
	if int64(len(failed))*10 > sent {
		t.Errorf("%d of %d requests failed, more than 10%%", len(failed), sent)
	}

	for _, o := range others {
		if o.status != http.StatusTooManyRequests || o.what != "" {
			continue
		}
		s := setOf(o.set)
		named := false
		for _, v := range o.violated {
			named = named || v.Rule == o.rule
			violatedBy[o.set+" "+v.Rule]++
			var r *invRule
			for i := range s.rules {
				if s.rules[i].name == v.Rule {
					r = &s.rules[i]
				}
			}
			if r == nil {
				t.Errorf("a 429 on %s names rule %q, not one of the set", o.set, v.Rule)
				continue
			}
			if v.Limit != int64(r.limit) || v.Used < v.Limit {
				t.Errorf("a 429 on %s for %s reports %s used %d of %d", o.set, o.to, v.Rule, v.Used, v.Limit)
			}
			k := ruleKey{s.path, r.name, keyOf(r, o.to, o.content)}
			after := o.start.Add(-r.window - time.Duration(r.limit)*time.Millisecond)
			n := mayCount(delivered[k], after, o.end)
			maybe := mayCount(undelivered[k], after, o.end)
			if n+maybe < r.limit {
				unexplained++
				if unexplained <= 5 {
					t.Errorf("a 429 on %s for %s %q by %s (limit %d in %s) decided in [%s, %s]: only %d messages (and %d failed requests) may count in its window",
						o.set, o.to, o.content, r.name, r.limit, r.window, o.start.Format("15:04:05.000"), o.end.Format("15:04:05.000"), n, maybe)
				}
			}
		}
		if !named {
			t.Errorf("a 429's rule %q is not among its violated rules %+v", o.rule, o.violated)
		}
	}

	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[int(p*float64(len(lat)-1))].Round(time.Millisecond)
	}
	t.Logf("send-to-arrival (each message's clock tolerance): p50 %s, p99 %s, max %s; %d denials checked, %d unexplained",
		pct(0.5), pct(0.99), pct(1), denials, unexplained)
	for _, s := range invSets {
		for _, r := range s.rules {
			arrived, certain := 0, 0
			for k, spans := range delivered {
				if k.set != s.path || k.rule != r.name {
					continue
				}
				arrived = max(arrived, mostArrivedWithin(spans, r.window))
				certain = max(certain, mostDecidedWithin(spans, r.window))
			}
			t.Logf("  %-4s %-17s limit %2d per %-8s: denied %5d (violated in %5d); most arrivals in a window %2d, most surely decided in one %2d",
				s.name, r.name, r.limit, r.window, denied[s.path+" "+r.name], violatedBy[s.path+" "+r.name], arrived, certain)
			if certain > r.limit {
				t.Errorf("%s %s: %d messages were sent and delivered within less than %s, over its limit %d",
					s.name, r.name, certain, r.window, r.limit)
			}
		}
	}
}

// mostArrivedWithin returns the most spans whose arrivals fall within less
// than w of each other: what a sliding window of w over the upstream's
// receive times counts at most. Only reported: delivery jitter can push it
// over a limit that the decisions kept.
func mostArrivedWithin(spans []span, w time.Duration) int {
	times := make([]time.Time, len(spans))
	for i, s := range spans {
		times[i] = s.at
	}
	sort.Slice(times, func(i, j int) bool { return times[i].Before(times[j]) })
	most, i := 0, 0
	for j := range times {
		for times[j].Sub(times[i]) >= w {
			i++
		}
		most = max(most, j-i+1)
	}
	return most
}

// mostDecidedWithin returns the largest group of spans whose latest
// arrival minus earliest send is under w: their decisions, each between its
// send and its arrival, certainly fell within less than w of each other.
// Its earliest send is some span's; for each candidate, the group is every
// span sent no earlier and arrived before that send plus w.
func mostDecidedWithin(spans []span, w time.Duration) int {
	most := 0
	for _, first := range spans {
		n := 0
		for _, s := range spans {
			if !s.sent.Before(first.sent) && s.at.Sub(first.sent) < w {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

// mayCount counts the spans that a decision at some moment in [s, e] may
// have counted in a window that starts after after (s-window-slack): sent
// by e, arrived after after.
func mayCount(spans []span, after, e time.Time) int {
	n := 0
	for _, s := range spans {
		if !s.sent.After(e) && s.at.After(after) {
			n++
		}
	}
	return n
}

// TestInvariantChecker pins the checker's window arithmetic on explicit
// times (ms after t0).
func TestInvariantChecker(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	ms := func(m int) time.Time { return t0.Add(time.Duration(m) * time.Millisecond) }
	spans := func(pairs ...[2]int) []span {
		var out []span
		for _, p := range pairs {
			out = append(out, span{ms(p[0]), ms(p[1])})
		}
		return out
	}
	for _, tc := range []struct {
		name             string
		spans            []span
		arrived, decided int
	}{
		{"none", nil, 0, 0},
		{"one", spans([2]int{0, 10}), 1, 1},
		{"within", spans([2]int{0, 10}, [2]int{900, 990}), 2, 2},
		// (now-w, now]: a record w old has left the window.
		{"arrivals w apart", spans([2]int{0, 10}, [2]int{990, 1010}), 1, 1},
		// Arrived 900 ms apart, but sent 1000 ms apart: the decisions
		// may have been a full window apart.
		{"jitter", spans([2]int{0, 100}, [2]int{995, 1000}), 2, 1},
		{"slow one", spans([2]int{0, 10}, [2]int{20, 30}, [2]int{40, 1200}), 2, 2},
		{"later group", spans([2]int{0, 10}, [2]int{2000, 2010}, [2]int{2100, 2110}, [2]int{2200, 2990}), 3, 3},
	} {
		if got := mostArrivedWithin(tc.spans, time.Second); got != tc.arrived {
			t.Errorf("%s: mostArrivedWithin = %d, want %d", tc.name, got, tc.arrived)
		}
		if got := mostDecidedWithin(tc.spans, time.Second); got != tc.decided {
			t.Errorf("%s: mostDecidedWithin = %d, want %d", tc.name, got, tc.decided)
		}
	}
	sp := spans([2]int{0, 50}, [2]int{100, 150}, [2]int{200, 250})
	for _, tc := range []struct {
		after, e int
		want     int
	}{
		{-1, 300, 3}, {50, 300, 2}, {49, 99, 1}, {49, 100, 2}, {250, 400, 0}, {-100, -1, 0},
	} {
		if got := mayCount(sp, ms(tc.after), ms(tc.e)); got != tc.want {
			t.Errorf("mayCount(after %d, by %d) = %d, want %d", tc.after, tc.e, got, tc.want)
		}
	}
}
