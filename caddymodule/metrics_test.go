package caddymodule_test

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// samples are the frequency cap series scraped from /metrics, by
// name{labels} with the labels sorted by name, as Prometheus writes them.
type samples map[string]float64

// scrape reads the admin endpoint's /metrics, the way Prometheus would.
func scrape(t *testing.T) (samples, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, fmt.Sprintf("http://localhost:%d/metrics", adminPort(t)), nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := adminClient.Do(req)
	if err != nil {
		t.Fatalf("scraping /metrics: %v", err)
	}
	defer res.Body.Close()
	body, err := io.ReadAll(res.Body)
	if err != nil || res.StatusCode != http.StatusOK {
		t.Fatalf("scraping /metrics: %d %v", res.StatusCode, err)
	}
	s := samples{}
	sc := bufio.NewScanner(strings.NewReader(string(body)))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "caddy_frequency_cap_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metrics line %q: %v", line, err)
		}
		s[line[:i]] = v
	}
	return s, string(body)
}

// series names one series: series("x_total", "handler", "h", "rule", "r").
func series(name string, labels ...string) string {
	pairs := make([]string, 0, len(labels)/2)
	for i := 0; i+1 < len(labels); i += 2 {
		pairs = append(pairs, fmt.Sprintf("%s=%q", labels[i], labels[i+1]))
	}
	sort.Strings(pairs)
	return name + "{" + strings.Join(pairs, ",") + "}"
}

func decisions(handler, rule, outcome string) string {
	return series("caddy_frequency_cap_decisions_total", "handler", handler, "rule", rule, "outcome", outcome)
}

func storeCalls(handler, op string) string {
	return series("caddy_frequency_cap_store_duration_seconds_count", "handler", handler, "op", op)
}

func storeErrors(handler, op string) string {
	return series("caddy_frequency_cap_store_errors_total", "handler", handler, "op", op)
}

func refunds(handler string) string {
	return series("caddy_frequency_cap_refunds_total", "handler", handler)
}

func missingDims(handler, dim string) string {
	return series("caddy_frequency_cap_missing_dimensions_total", "handler", handler, "dimension", dim)
}

// expectDeltas checks that each series moved by exactly its delta between
// two scrapes, and that it exists in the second.
func expectDeltas(t *testing.T, before, after samples, want map[string]float64) {
	t.Helper()
	keys := make([]string, 0, len(want))
	for k := range want {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v, ok := after[k]
		if !ok {
			t.Errorf("%s is not exposed", k)
			continue
		}
		if got := v - before[k]; math.Abs(got-want[k]) > 1e-9 {
			t.Errorf("%s moved by %v, want %v", k, got, want[k])
		}
	}
}

// TestMetrics proves, by scraping the admin endpoint's /metrics of the
// running Caddy, that each series moves as documented in metrics.go: an
// admitted request counts allowed for every rule it applied, a denial
// counts denied for the denying rule only, a rule left out for a missing
// dimension counts nothing while the dimension is counted as missing, a
// refund is counted, a store failure counts error for every rule and a
// store error for the operation, dry run counts dry_run_deny, every store
// call (decide, refund, and the admin API's usage and reset) lands in the
// latency histogram, and no dimension value appears anywhere.
func TestMetrics(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, fmt.Sprintf(`
	handle /live {
		frequency_cap {
			name       m_live
			key_prefix %s
			on_missing skip
			refund_on  5xx
			dimension recipient {json.to}
			dimension channel   {http.request.header.X-Channel}
			rule two {
				by     recipient
				limit  2
				window 1m
			}
			rule wide {
				by     recipient
				limit  100
				window 1h
			}
			rule per_channel {
				by     recipient channel
				limit  100
				window 1h
			}
		}
		reverse_proxy %s
	}
	handle /down {
		frequency_cap {
			name m_down
			redis {
				address 127.0.0.1:%d
				timeout 100ms
			}
			dimension recipient {json.to}
			rule r {
				by     recipient
				limit  5
				window 1m
			}
		}
		reverse_proxy %[2]s
	}
	handle /dry {
		frequency_cap {
			name       m_dry
			key_prefix %[4]s
			dry_run
			dimension recipient {json.to}
			rule once {
				by     recipient
				limit  1
				window 1m
			}
		}
		reverse_proxy %[2]s
	}`, testPrefix(), up.addr(), freePort(t), testPrefix()))

	before, _ := scrape(t)
	const alice, bob = "alice-metrics-4711", "bob-metrics-4712"
	expectStatus(t, g.send("/live", map[string]any{"to": alice}, "X-Channel: sms-4713"), http.StatusOK)
	expectStatus(t, g.send("/live", map[string]any{"to": alice}), http.StatusOK)
	expectStatus(t, g.send("/live", map[string]any{"to": alice}, "X-Channel: sms-4713"), http.StatusTooManyRequests)
	expectStatus(t, g.send("/live", map[string]any{"to": bob}, "X-Want-Status: 500"), http.StatusInternalServerError)
	expectStatus(t, g.send("/live", map[string]any{}), http.StatusOK)
	for i := 0; i < 2; i++ {
		expectStatus(t, g.send("/down", map[string]any{"to": alice}), http.StatusOK)
		expectStatus(t, g.send("/dry", map[string]any{"to": alice}), http.StatusOK)
	}
	expectStatus(t, adminDo(t, http.MethodGet, "/frequency_cap/m_live/usage?recipient="+alice), http.StatusOK)
	expectStatus(t, adminDo(t, http.MethodDelete, "/frequency_cap/m_live/usage?recipient="+alice), http.StatusOK)
	after, text := scrape(t)

	expectDeltas(t, before, after, map[string]float64{
		// alice+sms, alice, bob (refunded): admitted; the third alice
		// is refused by two alone; the empty message decides nothing.
		decisions("m_live", "two", "allowed"):         3,
		decisions("m_live", "wide", "allowed"):        3,
		decisions("m_live", "per_channel", "allowed"): 1,
		decisions("m_live", "two", "denied"):          1,
		decisions("m_live", "wide", "denied"):         0,
		decisions("m_live", "per_channel", "denied"):  0,
		decisions("m_live", "two", "error"):           0,
		decisions("m_live", "two", "dry_run_deny"):    0,
		missingDims("m_live", "channel"):              3,
		missingDims("m_live", "recipient"):            1,
		refunds("m_live"):                             1,
		storeCalls("m_live", "decide"):                4,
		storeCalls("m_live", "refund"):                1,
		storeCalls("m_live", "usage"):                 1,
		storeCalls("m_live", "reset"):                 1,
		storeErrors("m_live", "decide"):               0,

		decisions("m_down", "r", "error"):   2,
		decisions("m_down", "r", "allowed"): 0,
		storeCalls("m_down", "decide"):      2,
		storeErrors("m_down", "decide"):     2,

		decisions("m_dry", "once", "allowed"):      1,
		decisions("m_dry", "once", "dry_run_deny"): 1,
		decisions("m_dry", "once", "denied"):       0,
	})
	for _, v := range []string{alice, bob, "sms-4713"} {
		if strings.Contains(text, v) {
			t.Errorf("/metrics carries the dimension value %q", v)
		}
	}
	// The histogram's buckets are exposed and cumulative.
	le := `caddy_frequency_cap_store_duration_seconds_bucket{handler="m_live",op="decide",le="+Inf"}`
	if after[le] != after[storeCalls("m_live", "decide")] {
		t.Errorf("%s = %v, want the count %v", le, after[le], after[storeCalls("m_live", "decide")])
	}
}

// The write each Redis node takes is on /metrics as soon as the gateway
// has asked it at start: caddy_frequency_cap_store_write_path{handler,
// node, path} is 1 with the path the server supports (SET … IFEQ runs
// there or not), the metric an operator upgrading to Valkey 8.1 watches.
func TestWritePathMetric(t *testing.T) {
	srv := redistest.Start(t)
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	want := "script"
	if redistest.HasSetIFEQ(t, c, "wpm:probe") {
		want = "native"
	}
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap {
		name       m_write_path
		key_prefix %s
		redis      redis://%s/0
		dimension recipient {json.to}
		rule r {
			by     recipient
			limit  5
			window 1m
		}
	}
	respond "sent"`, testPrefix(), srv.Addr))
	expectStatus(t, g.send("/", map[string]any{"to": "alice"}), http.StatusOK)
	key := series("caddy_frequency_cap_store_write_path", "handler", "m_write_path", "node", srv.Addr, "path", want)
	deadline := time.Now().Add(5 * time.Second)
	for {
		got, text := scrape(t)
		if got[key] == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s = 1 on /metrics:\n%s", key, grepLines(text, "write_path"))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// grepLines returns the lines of text that contain s.
func grepLines(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
