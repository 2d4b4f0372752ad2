package caddymodule

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// The fault tests run load through the in-process Caddy with two cap sets
// on one store, on_error allow on /allow and deny on /deny, and break the
// store mid-load.
const (
	// faultTimeout is the handlers' store timeout.
	faultTimeout = 100 * time.Millisecond
	// faultMargin is what a request may take beyond faultTimeout: the
	// HTTP round trips through the in-process Caddy and, when it passes,
	// the upstream, under -race on a CI machine running other packages'
	// tests at the same time.
	faultMargin = 300 * time.Millisecond
	// faultRecovery bounds how long after the store is back (restarted,
	// unpaused, failed over) requests may still fail.
	faultRecovery = 3 * time.Second
	// faultWorkers is how many senders keep sending.
	faultWorkers = 8
	// goroutineSlack is how many goroutines more than before the fault the
	// process may hold once everything has settled: far fewer than the
	// requests that failed, so a leak per failure would show.
	goroutineSlack = 10
)

// TestFaults breaks the store under load through the Caddy handler:
// Redis killed and restarted, Redis paused longer than the timeout, a
// cluster master failed over (coordinated, then forced), the script cache
// flushed. For each it proves that no request waits longer than the
// timeout plus faultMargin, that on_error is applied (allow passes the
// request to the upstream undecided, deny answers 503 with a JSON reason,
// and never passes an undecided request), that decisions succeed again by
// themselves within faultRecovery, that no request is dropped (a panic
// in the handler would drop its connection), and that no goroutine is
// left behind. It measures what the store's counts gained or lost against
// the decisions the clients saw (see faultRun.account).
func TestFaults(t *testing.T) {
	t.Run("redis killed and restarted", func(t *testing.T) {
		// With an append-only file, as a production Redis would have: a
		// killed process loses nothing it wrote (the OS has it), so
		// counts survive. Without persistence a restart forgets every
		// count; that needs no test.
		aof := []string{"--appendonly", "yes", "--appendfsync", "everysec"}
		srv := redistest.Start(t, aof...)
		f := startFaultRun(t, "address "+srv.Addr, faultRecipients(8, nil))
		f.run(t, func() {
			srv.Stop()
			time.Sleep(time.Second)
			srv.Restart(t, append(aof, "--dir", srv.Dir)...)
		})
		f.expectFailures(t)
		f.account(t, false)
	})

	t.Run("redis paused", func(t *testing.T) {
		srv := redistest.Start(t)
		admin := plainClient(t, srv.Addr)
		f := startFaultRun(t, "address "+srv.Addr, faultRecipients(8, nil))
		f.run(t, func() {
			// Every command waits, the handlers' too, until the pause
			// ends; those that timed out then run, and record.
			if err := admin.Do(context.Background(), "CLIENT", "PAUSE", 500, "ALL").Err(); err != nil {
				t.Errorf("CLIENT PAUSE: %v", err)
			}
			time.Sleep(500 * time.Millisecond)
		})
		f.expectFailures(t)
		f.account(t, false)
	})

	t.Run("script cache flushed", func(t *testing.T) {
		srv := redistest.Start(t)
		admin := plainClient(t, srv.Addr)
		f := startFaultRun(t, "address "+srv.Addr, faultRecipients(8, nil))
		ctx := context.Background()
		f.run(t, func() {
			if err := admin.ConfigResetStat(ctx).Err(); err != nil {
				t.Errorf("CONFIG RESETSTAT: %v", err)
			}
			for i := 0; i < 5; i++ {
				if err := admin.ScriptFlush(ctx).Err(); err != nil {
					t.Errorf("SCRIPT FLUSH: %v", err)
				}
				time.Sleep(100 * time.Millisecond)
			}
		})
		// EVALSHA meets NOSCRIPT and the same call falls back to EVAL:
		// no request notices, beyond the odd timeout of a busy machine.
		evalsha, eval := commandStats(t, admin, "evalsha"), commandStats(t, admin, "eval")
		t.Logf("  EVALSHA: %d calls, %d failed (NOSCRIPT); EVAL: %d calls, %d failed", evalsha.calls, evalsha.failed, eval.calls, eval.failed)
		if evalsha.failed == 0 || eval.calls == 0 {
			t.Errorf("the flushes never made a decision fall back to EVAL")
		}
		if eval.failed != 0 {
			t.Errorf("%d EVAL calls failed", eval.failed)
		}
		var timedOut int
		for _, r := range f.measured() {
			switch {
			case r.decided:
			case r.took >= faultTimeout:
				timedOut++
			default:
				t.Errorf("a %s request at %s failed after %s, before the timeout", faultRoutes[r.route], r.start.Format("15:04:05.000"), r.took)
			}
		}
		if all := len(f.measured()); timedOut*20 > all {
			t.Errorf("%d of %d requests timed out around SCRIPT FLUSH, over 5%%", timedOut, all)
		}
		f.account(t, false)
	})

	t.Run("cluster master failed over", func(t *testing.T) {
		c := redistest.StartCluster(t, 3, 1)
		// Every recipient lives on the master that fails over.
		first := "fo0"
		target := c.MasterOf(t, first)
		recipients := faultRecipients(8, func(r string) bool { return c.MasterOf(t, r) == target })
		slot := c.KeySlot(t, first)
		lines := "address " + strings.Join(c.Addrs(), " ") + "\n\t\t\tcluster"
		for _, option := range []string{"", "FORCE"} {
			name := "coordinated"
			if option != "" {
				name = strings.ToLower(option)
			}
			t.Run(name, func(t *testing.T) {
				f := startFaultRun(t, lines, recipients)
				f.run(t, func() {
					old, promoted, took := c.FailoverWith(t, slot, option)
					t.Logf("CLUSTER FAILOVER %s: %s took over from %s in %s", option, promoted.Addr, old.Addr, took.Round(time.Millisecond))
				})
				// A coordinated failover waits for the replica to
				// catch up: nothing acknowledged is lost. A forced
				// one may lose what the old master acknowledged but
				// had not replicated: measured, not asserted.
				f.account(t, option == "FORCE")
			})
		}
	})
}

// faultRecipients returns the first n of fo0, fo1, ... that keep accepts
// (all when keep is nil).
func faultRecipients(n int, keep func(string) bool) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		r := fmt.Sprint("fo", i)
		if keep == nil || keep(r) {
			out = append(out, r)
		}
	}
	return out
}

// faultRoutes are the two cap sets: their path and on_error.
var faultRoutes = [2]string{"allow", "deny"}

// faultResult is one request as its sender saw it.
type faultResult struct {
	route   int // index in faultRoutes
	to      string
	start   time.Time
	took    time.Duration
	status  int
	decided bool // the answer carries the quota: the store decided
	passed  bool // the upstream answered
	body    string
	err     error
}

// faultRun is a gateway with the two cap sets on one store, its upstream,
// and the load sent through it.
type faultRun struct {
	g          *gateway
	up         *upstream
	names      [2]string
	recipients []string
	tr         *http.Transport
	hc         *http.Client

	mu      sync.Mutex
	results []faultResult
	// warm is how many of results are the warm-up's.
	warm int
	// faultStart is when the fault began, faultEnd when the store was back.
	faultStart, faultEnd time.Time
	// streak counts a route's requests decided in a row since faultEnd
	// (in the order they finished); recovered is when
	// its first streak of recoveryStreak was complete. Requests already in
	// flight then may still fail: with several batches in flight, each of
	// the first ones after a restart may hold a connection the restart
	// broke. Each route has a store of its own, with its own connections.
	streak    [2]int
	recovered [2]time.Time

	goroutines [2]int // settled, before and after
	stalls     *stallMeter
}

// recoveryStreak is how many requests in a row must be decided for the
// service to count as recovered. A request may still time out afterwards:
// under -race on a busy machine a decision now and then takes longer than
// faultTimeout, with or without a fault. Up to 5% may; none may fail
// before its timeout, which would be the store still failing.
const recoveryStreak = 20

// startFaultRun loads a gateway whose cap sets use the store that
// redisLines configure. Their limits are far above what the test sends,
// so every decision that reaches the store admits and records, and the
// store's counts can be held against what the clients saw.
func startFaultRun(t *testing.T, redisLines string, recipients []string) *faultRun {
	f := &faultRun{up: startUpstream(t), recipients: recipients}
	prefix := testPrefix()
	var site strings.Builder
	for i, route := range faultRoutes {
		f.names[i] = strings.TrimSuffix(prefix, ":") + "_" + route
		fmt.Fprintf(&site, `
	handle /%[1]s {
		frequency_cap {
			name %[2]s
			redis {
				%[3]s
				timeout %[4]s
			}
			key_prefix %[5]s%[1]s:
			on_error %[1]s
			dimension recipient {json.to}
			dimension content   {json.content}
			rule recipient_hour {
				by     recipient
				limit  1000000
				window 1h
			}
			rule same_content_hour {
				by     recipient content
				limit  1000000
				window 1h
			}
		}
		reverse_proxy %[6]s
	}`, route, f.names[i], redisLines, faultTimeout, prefix, f.up.addr())
	}
	f.g = startGateway(t, site.String())
	f.tr = &http.Transport{MaxIdleConnsPerHost: 2 * faultWorkers}
	f.hc = &http.Client{Transport: f.tr, Timeout: 10 * time.Second}
	t.Cleanup(f.tr.CloseIdleConnections)
	return f
}

// load sends until stop is closed.
func (f *faultRun) load(stop <-chan struct{}) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := 0; w < faultWorkers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r := f.send((w+i)%2, f.recipients[(w*5+i)%len(f.recipients)], fmt.Sprint("c", i%3))
				f.mu.Lock()
				f.results = append(f.results, r)
				if rt := r.route; !f.faultEnd.IsZero() && r.start.After(f.faultEnd) && f.recovered[rt].IsZero() {
					switch {
					case r.err != nil || !r.decided:
						f.streak[rt] = 0
					default:
						f.streak[rt]++
					}
					if f.streak[rt] == recoveryStreak {
						f.recovered[rt] = time.Now()
					}
				}
				f.mu.Unlock()
			}
		}()
	}
	return &wg
}

func (f *faultRun) send(route int, to, content string) faultResult {
	r := faultResult{route: route, to: to, start: time.Now()}
	body, _ := json.Marshal(map[string]string{"to": to, "content": content})
	res, err := f.hc.Post(f.g.url+"/"+faultRoutes[route], "application/json", bytes.NewReader(body))
	if err != nil {
		r.took, r.err = time.Since(r.start), err
		return r
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	r.took, r.err = time.Since(r.start), err
	r.status, r.body = res.StatusCode, string(b)
	r.decided = res.Header.Get("RateLimit") != ""
	r.passed = res.Header.Get("X-Upstream") == "push"
	return r
}

// run warms up, counts the settled goroutines, sends for a while, calls
// fault (which returns when the store is back), keeps sending until no
// request has failed for a while, stops, and counts the goroutines again.
func (f *faultRun) run(t *testing.T, fault func()) {
	t.Helper()
	warm := make(chan struct{})
	wg := f.load(warm)
	time.Sleep(300 * time.Millisecond)
	close(warm)
	wg.Wait()
	f.warm = len(f.results)
	f.goroutines[0] = f.settledGoroutines(0)

	f.stalls = startStallMeter()
	stop := make(chan struct{})
	wg = f.load(stop)
	// halt stops the load, also when fault fails the test.
	halt := sync.OnceFunc(func() {
		close(stop)
		wg.Wait()
		f.stalls.stop()
	})
	defer halt()
	time.Sleep(500 * time.Millisecond)
	f.mu.Lock()
	f.faultStart = time.Now()
	f.mu.Unlock()
	fault()
	f.mu.Lock()
	f.faultEnd = time.Now()
	f.mu.Unlock()
	// Keep sending for a while after recovery, to see it last.
	const after = 500 * time.Millisecond
	for {
		f.mu.Lock()
		rec := f.recovered
		f.mu.Unlock()
		done := !rec[0].IsZero() && !rec[1].IsZero() && time.Since(rec[0]) >= after && time.Since(rec[1]) >= after
		if done || time.Since(f.faultEnd) > faultRecovery+after {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	halt()
	f.goroutines[1] = f.settledGoroutines(f.goroutines[0] + goroutineSlack)
	f.check(t)
}

// settledGoroutines closes idle connections on both sides of the gateway
// and waits until the count of goroutines stops falling (or, with a
// target, reaches it), for at most 5 s.
func (f *faultRun) settledGoroutines(target int) int {
	deadline := time.Now().Add(5 * time.Second)
	prev, stable := -1, 0
	for {
		f.tr.CloseIdleConnections()
		client.CloseIdleConnections()
		f.up.CloseClientConnections()
		time.Sleep(50 * time.Millisecond)
		n := runtime.NumGoroutine()
		if n >= prev && prev >= 0 {
			stable++
		} else {
			stable = 0
		}
		prev = n
		if (target > 0 && n <= target) || (target == 0 && stable >= 4) || time.Now().After(deadline) {
			return n
		}
	}
}

// measured returns the results after the warm-up.
func (f *faultRun) measured() []faultResult { return f.results[f.warm:] }

// check holds every answer to its route's policy and reports the run.
func (f *faultRun) check(t *testing.T) {
	t.Helper()
	bound := faultTimeout + faultMargin
	var n, undecided [2]int
	var worst, worstIn [2]time.Duration
	// after counts the requests started once their route recovered; of
	// them, slow went undecided after the timeout, fast before it (an
	// error).
	var after [2]int
	var slow, fast [2][]string // when they started after the store was back, and took
	lat := make([]time.Duration, 0, len(f.measured()))
	bad, excused := 0, 0
	for _, r := range f.measured() {
		n[r.route]++
		lat = append(lat, r.took)
		worst[r.route] = max(worst[r.route], r.took)
		if !r.start.Before(f.faultStart) && !r.start.After(f.faultEnd) {
			worstIn[r.route] = max(worstIn[r.route], r.took)
		}
		var problem string
		switch {
		case r.err != nil:
			problem = "no answer: " + r.err.Error()
		case r.took > bound && r.took-f.stalls.within(r.start, r.start.Add(r.took)) > bound:
			problem = fmt.Sprintf("took %s (%s of it with the whole test process stalled), over the timeout %s plus margin %s",
				r.took, f.stalls.within(r.start, r.start.Add(r.took)), faultTimeout, faultMargin)
		case r.took > bound:
			excused++
		case r.decided && (r.status != http.StatusOK || !r.passed):
			problem = fmt.Sprintf("decided, yet answered %d not by the upstream", r.status)
		case !r.decided && r.route == 0 && (r.status != http.StatusOK || !r.passed):
			problem = fmt.Sprintf("undecided under on_error allow, yet answered %d not by the upstream", r.status)
		case !r.decided && r.route == 1 && (r.status != http.StatusServiceUnavailable || r.passed ||
			!strings.Contains(r.body, `"error":"frequency cap store unavailable"`)):
			problem = fmt.Sprintf("undecided under on_error deny, yet answered %d %q (upstream: %v)", r.status, r.body, r.passed)
		}
		failed := !r.decided || r.err != nil
		if failed {
			undecided[r.route]++
		}
		if rec := f.recovered[r.route]; !rec.IsZero() && !r.start.Before(rec) {
			after[r.route]++
			when := fmt.Sprintf("%s+%s", r.start.Sub(f.faultEnd).Round(time.Millisecond), r.took.Round(time.Millisecond))
			switch {
			case failed && r.took >= faultTimeout:
				slow[r.route] = append(slow[r.route], when)
			case failed:
				fast[r.route] = append(fast[r.route], when)
			}
		}
		if problem != "" {
			bad++
			if bad <= 5 {
				t.Errorf("%s request at %s: %s", faultRoutes[r.route], r.start.Format("15:04:05.000"), problem)
			}
		}
	}
	if bad > 5 {
		t.Errorf("... %d bad answers in all", bad)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("fault %s; %d requests, p50 %s, p99 %s, max %s (bound %s; %d over it only by stalls of the test process, longest stall %s)",
		f.faultEnd.Sub(f.faultStart).Round(time.Millisecond), len(lat), pctOf(lat, 0.5), pctOf(lat, 0.99), pctOf(lat, 1), bound,
		excused, f.stalls.longest().Round(time.Millisecond))
	for i, route := range faultRoutes {
		t.Logf("  on_error %-5s: %5d requests, %4d undecided; slowest %s, during the fault %s",
			route, n[i], undecided[i], worst[i].Round(time.Millisecond), worstIn[i].Round(time.Millisecond))
		if f.recovered[i].IsZero() {
			t.Errorf("on_error %s: no %d requests in a row were decided within %s after the store was back", route, recoveryStreak, faultRecovery)
			continue
		}
		rec := f.recovered[i].Sub(f.faultEnd)
		t.Logf("    recovered %s after the store was back (%d decided in a row); since then, of %d requests, %d timed out %v, %d failed %v",
			rec.Round(time.Millisecond), recoveryStreak, after[i], len(slow[i]), slow[i], len(fast[i]), fast[i])
		if rec > faultRecovery {
			t.Errorf("on_error %s: recovered only %s after the store was back, over %s", route, rec, faultRecovery)
		}
		if len(fast[i]) > 0 {
			t.Errorf("on_error %s: %d requests failed without waiting for the timeout after recovery: the store still failed", route, len(fast[i]))
		}
		if len(slow[i])*20 > after[i] {
			t.Errorf("on_error %s: %d of %d requests timed out after recovery, over 5%%", route, len(slow[i]), after[i])
		}
	}
	t.Logf("  goroutines settled at %d before, %d after", f.goroutines[0], f.goroutines[1])
	if d := f.goroutines[1] - f.goroutines[0]; d > goroutineSlack {
		t.Errorf("%d goroutines more after the fault than before (%d, %d): a leak", d, f.goroutines[0], f.goroutines[1])
	}
}

// expectFailures fails the test unless both policies were seen at work.
func (f *faultRun) expectFailures(t *testing.T) {
	t.Helper()
	var seen [2]bool
	for _, r := range f.measured() {
		if r.err == nil && !r.decided {
			seen[r.route] = true
		}
	}
	for i, route := range faultRoutes {
		if !seen[i] {
			t.Errorf("no request under on_error %s went undecided: the fault did not bite", route)
		}
	}
}

// account holds the store's counts against what the clients saw, per cap
// set, warm-up included: extra are records of requests the clients saw
// undecided (the script ran after the caller had given up, or its answer
// was lost), lost are admissions the store no longer counts. Extra records
// only over-count, until they leave their window, and can be no more than
// the undecided requests; each lost one lets a recipient get one message
// more than its cap. None may be lost unless mayLose. Per recipient only
// the difference shows, so lost and extra are lower bounds when both occur.
func (f *faultRun) account(t *testing.T, mayLose bool) {
	t.Helper()
	for i, route := range faultRoutes {
		admitted := map[string]int64{}
		var undecided int64
		for _, r := range f.results {
			switch {
			case r.route != i:
			case r.decided:
				admitted[r.to]++
			default:
				undecided++
			}
		}
		var extra, lost, counted, decided int64
		for _, who := range f.recipients {
			used := usageOf(t, f.names[i], "recipient="+who)["recipient_hour"].Used
			counted += used
			decided += admitted[who]
			switch d := used - admitted[who]; {
			case d > 0:
				extra += d
			case d < 0:
				lost -= d
			}
		}
		t.Logf("  on_error %-5s: the store counts %d, the clients saw %d admitted and %d undecided: %d extra, %d lost",
			route, counted, decided, undecided, extra, lost)
		if extra > undecided {
			t.Errorf("on_error %s: %d extra records, but only %d requests went undecided", route, extra, undecided)
		}
		if lost > 0 && !mayLose {
			t.Errorf("on_error %s: %d admissions missing from the store's counts", route, lost)
		}
	}
}

func pctOf(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[int(p*float64(len(sorted)-1))].Round(time.Millisecond)
}

// stallMeter notes when the test process itself did not run (descheduled
// on a busy machine, or stopped for GC): a goroutine sleeps a few ms at a
// time, and every wake-up more than stallMin late is a stall. A request
// slowed by a stall of the whole process says nothing about the handler,
// so the latency bound is applied to a request's time less the stalls
// within it.
type stallMeter struct {
	mu     sync.Mutex
	stalls [][2]time.Time
	quit   chan struct{}
	done   chan struct{}
}

const stallMin = 20 * time.Millisecond

func startStallMeter() *stallMeter {
	m := &stallMeter{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		const tick = 2 * time.Millisecond
		last := time.Now()
		for {
			select {
			case <-m.quit:
				return
			case <-time.After(tick):
			}
			now := time.Now()
			if now.Sub(last) > tick+stallMin {
				m.mu.Lock()
				m.stalls = append(m.stalls, [2]time.Time{last.Add(tick), now})
				m.mu.Unlock()
			}
			last = now
		}
	}()
	return m
}

func (m *stallMeter) stop() {
	close(m.quit)
	<-m.done
}

// within returns how long the process stalled between from and to.
func (m *stallMeter) within(from, to time.Time) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	var d time.Duration
	for _, s := range m.stalls {
		a, b := s[0], s[1]
		if a.Before(from) {
			a = from
		}
		if b.After(to) {
			b = to
		}
		if b.After(a) {
			d += b.Sub(a)
		}
	}
	return d
}

func (m *stallMeter) longest() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	var d time.Duration
	for _, s := range m.stalls {
		d = max(d, s[1].Sub(s[0]))
	}
	return d
}

// cmdStats is a command's line of INFO commandstats.
type cmdStats struct{ calls, failed int64 }

// commandStats reads a command's calls and failed calls (rejected
// before running, or failed while running) since the last CONFIG
// RESETSTAT.
func commandStats(t *testing.T, c *redis.Client, cmd string) cmdStats {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	var st cmdStats
	for _, line := range strings.Split(info, "\n") {
		fields, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				st.calls = n
			case "rejected_calls", "failed_calls":
				st.failed += n
			}
		}
	}
	return st
}

// plainClient is a client to one server, closed at the end of the test.
func plainClient(t *testing.T, addr string) *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { c.Close() })
	return c
}
