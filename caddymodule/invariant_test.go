package caddymodule_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
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

// The gateways serve two cap sets. seed is the seed config (see the README).
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
		runInvariant(t, bin, "address "+srv.Addr, redisClient(t, srv.Addr), d)
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

// deliveriesOf reads the messages the upstream received: each one's set
// (its path), recipient and content, the send time its sender stamped in
// X-Sent-At, and when it arrived.
func deliveriesOf(t *testing.T, reqs []received) []delivery {
	t.Helper()
	out := make([]delivery, 0, len(reqs))
	for _, r := range reqs {
		var msg struct{ To, Content string }
		if err := json.Unmarshal(r.body, &msg); err != nil || r.broken {
			t.Errorf("the upstream received %q, not a whole JSON message", r.body)
			continue
		}
		ns, _ := strconv.ParseInt(r.header.Get("X-Sent-At"), 10, 64)
		out = append(out, delivery{set: r.path, to: msg.To, content: msg.Content, sent: time.Unix(0, ns), at: r.at})
	}
	return out
}

// outcome is what a sender saw of one message that was not admitted.
type outcome struct {
	set         string
	to, content string
	start, end  time.Time
	status      int    // 0: no answer
	what        string // the error, or the body of an unexpected answer
	rule        string // the denying rule of a 429
	violated    []violation
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
	up := startUpstream(t)
	prefix := testPrefix()
	site := invSite(redisLines, prefix, up.addr())
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
					if err := decodeStrict(b, &p); err != nil {
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
	got := deliveriesOf(t, up.all())
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
