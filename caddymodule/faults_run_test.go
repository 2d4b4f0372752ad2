package caddymodule_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
)

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
	var firstFast [2]string    // the first fast failure's answer
	lat := make([]time.Duration, 0, len(f.measured()))
	bad, excused := 0, 0
	for _, r := range f.measured() {
		n[r.route]++
		lat = append(lat, r.took)
		worst[r.route] = max(worst[r.route], r.took)
		if !r.start.Before(f.faultStart) && !r.start.After(f.faultEnd) {
			worstIn[r.route] = max(worstIn[r.route], r.took)
		}
		var wrong string
		switch {
		case r.err != nil:
			wrong = "no answer: " + r.err.Error()
		case r.took > bound && r.took-f.stalls.within(r.start, r.start.Add(r.took)) > bound:
			wrong = fmt.Sprintf("took %s (%s of it with the whole test process stalled), over the timeout %s plus margin %s",
				r.took, f.stalls.within(r.start, r.start.Add(r.took)), faultTimeout, faultMargin)
		case r.took > bound:
			excused++
		case r.decided && (r.status != http.StatusOK || !r.passed):
			wrong = fmt.Sprintf("decided, yet answered %d not by the upstream", r.status)
		case !r.decided && r.route == 0 && (r.status != http.StatusOK || !r.passed):
			wrong = fmt.Sprintf("undecided under on_error allow, yet answered %d not by the upstream", r.status)
		case !r.decided && r.route == 1 && (r.status != http.StatusServiceUnavailable || r.passed ||
			!strings.Contains(r.body, `"error":"frequency cap store unavailable"`)):
			wrong = fmt.Sprintf("undecided under on_error deny, yet answered %d %q (upstream: %v)", r.status, r.body, r.passed)
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
				if firstFast[r.route] == "" {
					firstFast[r.route] = fmt.Sprintf("%d %q %v", r.status, r.body, r.err)
				}
			}
		}
		if wrong != "" {
			bad++
			if bad <= 5 {
				t.Errorf("%s request at %s: %s", faultRoutes[r.route], r.start.Format("15:04:05.000"), wrong)
			}
		}
	}
	if bad > 5 {
		t.Errorf("... %d bad answers in all", bad)
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	t.Logf("fault %s; %d requests, p50 %s, p99 %s, max %s (bound %s; %d over it only by stalls of the test process, longest stall %s)",
		f.faultEnd.Sub(f.faultStart).Round(time.Millisecond), len(lat), percentile(lat, 0.5), percentile(lat, 0.99), percentile(lat, 1), bound,
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
			t.Errorf("on_error %s: %d requests failed without waiting for the timeout after recovery: the store still failed (the first answered %s)", route, len(fast[i]), firstFast[i])
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
