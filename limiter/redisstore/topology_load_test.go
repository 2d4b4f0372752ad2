package redisstore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// topologyLoad is the load of the tests that change a cluster's topology
// while gateways send: gateways (stores, each on a client of its own built
// from RedisConfig as the Caddy module builds it) send the seed config to
// cohorts of recipients, each recipient sent more than its limit, in
// single sends and in batch sends under BatchAll (reject) and BatchEach
// (drop) whose entries lie on different shards. What it proves at the
// end (check):
//
//   - every recipient was admitted exactly its limit, as its senders saw
//     it, and the store counts exactly those admissions: no over-admission,
//     no record lost, none counted twice;
//   - no decision waited past the timeout (plus a margin for scheduling);
//   - how many decisions failed (what on_error would have decided) and
//     why: reported, and held to the test's bound.
//
// Rolling windows would let a recipient in again a minute after its first
// admission, so each cohort is sent to for a few seconds only, and the
// next cohort takes over: every recipient's sends fall within one minute,
// whatever the test's length, and its limit is exactly
// recipient_minute's 15.
type topologyLoad struct {
	gateways []*Store
	rules    []*limiter.Rule
	// twoKeys is rules plus a rule over another dimension whose value is
	// the recipient's: two keys in one hash tag, so one script run reads
	// two keys of one slot, which a slot being migrated answers with
	// TRYAGAIN when one has moved and the other not.
	twoKeys []*limiter.Rule
	timeout time.Duration
	// refusals counts what the gateways' clients met, by error code.
	refusals *refusalTally

	stop     chan struct{}
	stopOnce sync.Once
	wg       sync.WaitGroup
	sent     atomic.Int64 // sends started, for picking recipients
	cohort   atomic.Pointer[cohort]
	phase    atomic.Pointer[string]
	slowest  atomic.Int64 // ns

	mu       sync.Mutex
	cohorts  []*cohort
	phases   []string
	byPhase  map[string]*phaseTally
	failures map[string]int // by kind
	examples map[string]string
	over     []string // decisions that took past the bound
}

// cohort is a set of recipients sent to together.
type cohort struct {
	index      int
	recipients []string
	started    time.Time
	sent       []atomic.Int64 // per recipient
	admitted   []atomic.Int64 // per recipient, as the senders saw it
	failed     []atomic.Int64 // per recipient, decisions that failed
}

// phaseTally counts one phase's decisions (a batch entry counts as one).
type phaseTally struct {
	decisions, failed, batches int
	worst                      time.Duration
}

const (
	// loadLimit is recipient_minute's limit: what each recipient ends with.
	loadLimit = 15
	// cohortSize is the recipients of a cohort: enough to spread over
	// every master.
	cohortSize = 48
	// cohortSends is how many sends each recipient gets before its
	// cohort may end, past its limit.
	cohortSends = 2 * loadLimit
	// cohortSpan is the shortest time a cohort is sent to, so that each
	// topology change meets several cohorts' writes.
	cohortSpan = 3 * time.Second
	// cohortMax is the longest a cohort may take: its recipients' sends
	// must fall within recipient_minute's minute.
	cohortMax = 45 * time.Second
	// loadBatchEntries is the entries of a batch send; every
	// loadBatchEvery-th round of sends over a cohort is batch sends.
	loadBatchEntries = 4
	loadBatchEvery   = 4
	// loadSenders is the concurrent senders per gateway, each pausing
	// loadPace between sends: about 1,500 sends a second in all, which
	// leaves the 2-core machine's Redis and redis-cli time to move slots
	// (unpaced, the senders starve them and a rebalance takes minutes).
	loadSenders = 4
	loadPace    = 8 * time.Millisecond
	// loadMargin is what a decision may take past the timeout: the
	// scheduling of a loaded 2-core machine under -race.
	loadMargin = 150 * time.Millisecond
)

// startTopologyLoad starts gateways stores on clients made by newClient
// and their senders, and the cohorts' rotation.
func startTopologyLoad(t *testing.T, gateways int, prefix string, timeout time.Duration, newClient func() Client) *topologyLoad {
	t.Helper()
	l := &topologyLoad{
		refusals: &refusalTally{byCode: map[string]int{}, examples: map[string]string{}},
		rules:    limitertest.SeedRules(),
		timeout:  timeout,
		stop:     make(chan struct{}),
		byPhase:  map[string]*phaseTally{},
		failures: map[string]int{},
		examples: map[string]string{},
	}
	l.twoKeys = append(append([]*limiter.Rule{}, l.rules...), &limiter.Rule{Name: "account_hour", By: []string{"account"}, Limit: 1_000_000, Window: limiter.Window{Duration: time.Hour}})
	for i := 0; i < gateways; i++ {
		cl := newClient()
		if cc, ok := cl.(*redis.ClusterClient); ok {
			cc.OnNewNode(func(n *redis.Client) { n.AddHook(refusalHook{l.refusals}) })
		}
		s := New(cl, Options{Prefix: prefix, Timeout: timeout})
		t.Cleanup(func() { s.Close() })
		l.gateways = append(l.gateways, s)
	}
	l.setPhase("start")
	l.nextCohort()
	for g, s := range l.gateways {
		for w := 0; w < loadSenders; w++ {
			l.wg.Add(1)
			go func() {
				defer l.wg.Done()
				l.send(s, g)
			}()
		}
	}
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		l.rotate(t)
	}()
	return l
}

// setPhase names what the decisions from now on are made during.
func (l *topologyLoad) setPhase(name string) {
	l.mu.Lock()
	l.phases = append(l.phases, name)
	l.byPhase[name] = &phaseTally{}
	l.mu.Unlock()
	l.phase.Store(&name)
}

// during runs change as the phase name, and returns how long it took.
func (l *topologyLoad) during(name string, change func()) time.Duration {
	l.setPhase(name)
	start := time.Now()
	change()
	return time.Since(start)
}

// nextCohort starts sending to a new cohort of recipients.
func (l *topologyLoad) nextCohort() {
	l.mu.Lock()
	co := &cohort{index: len(l.cohorts), started: time.Now()}
	for i := 0; i < cohortSize; i++ {
		co.recipients = append(co.recipients, fmt.Sprintf("r%d.%d", co.index, i))
	}
	co.sent = make([]atomic.Int64, cohortSize)
	co.admitted = make([]atomic.Int64, cohortSize)
	co.failed = make([]atomic.Int64, cohortSize)
	l.cohorts = append(l.cohorts, co)
	l.mu.Unlock()
	l.cohort.Store(co)
}

// rotate moves to the next cohort once the current one has been sent to
// for cohortSpan and every recipient of it cohortSends times.
func (l *topologyLoad) rotate(t *testing.T) {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-tick.C:
		}
		co := l.cohort.Load()
		if time.Since(co.started) < cohortSpan {
			continue
		}
		done := true
		for i := range co.sent {
			done = done && co.sent[i].Load() >= cohortSends
		}
		if done {
			l.nextCohort()
		} else if time.Since(co.started) > cohortMax {
			t.Errorf("cohort %d: not every recipient sent %d times within %s: the load is too slow for recipient_minute to bind alone", co.index, cohortSends, cohortMax)
			l.nextCohort()
		}
	}
}

// send is one sender's loop on gateway s.
func (l *topologyLoad) send(s *Store, g int) {
	ctx := context.Background()
	pace := time.NewTicker(loadPace)
	defer pace.Stop()
	for {
		select {
		case <-l.stop:
			return
		case <-pace.C:
		}
		k := int(l.sent.Add(1))
		co := l.cohort.Load()
		n := len(co.recipients)
		i, round := k%n, k/n
		if round%loadBatchEvery == 0 {
			// Entries a quarter of the cohort apart: different slots,
			// mostly on different masters.
			idx := make([]int, loadBatchEntries)
			reqs := make([]limiter.Request, loadBatchEntries)
			for e := range reqs {
				idx[e] = (i + e*n/loadBatchEntries) % n
				v := limitertest.Vals{"recipient": co.recipients[idx[e]], "content": fmt.Sprint("b", round%10)}
				reqs[e] = *limitertest.Req(time.Time{}, v, l.rules...)
				co.sent[idx[e]].Add(1)
			}
			start := time.Now()
			// Every other batch round under BatchEach (batch drop): on a
			// server with SET … IFEQ those are decided in Go master by
			// master (clustergo.go).
			mode := limiter.BatchAll
			if round%(2*loadBatchEvery) != 0 {
				mode = limiter.BatchEach
			}
			ds, err := s.DecideBatch(ctx, reqs, mode)
			l.note(co, idx, time.Since(start), err, true, func(e int) bool {
				if mode == limiter.BatchEach {
					return ds[e].Allowed
				}
				return !limiter.AnyDenied(ds)
			})
			continue
		}
		v := limitertest.Vals{"recipient": co.recipients[i], "account": co.recipients[i], "content": fmt.Sprint("c", round%10)}
		rules := l.rules
		if k%3 == 0 {
			rules = l.twoKeys
		}
		co.sent[i].Add(1)
		start := time.Now()
		d, err := s.Decide(ctx, limitertest.Req(time.Time{}, v, rules...))
		l.note(co, []int{i}, time.Since(start), err, false, func(int) bool { return d.Allowed })
	}
}

// note counts one decision (or batch) of recipients idx of co that took
// took and failed with err, or admitted those for which admitted says so.
func (l *topologyLoad) note(co *cohort, idx []int, took time.Duration, err error, batch bool, admitted func(int) bool) {
	for {
		w := l.slowest.Load()
		if int64(took) <= w || l.slowest.CompareAndSwap(w, int64(took)) {
			break
		}
	}
	phase := *l.phase.Load()
	l.mu.Lock()
	p := l.byPhase[phase]
	p.decisions += len(idx)
	p.worst = max(p.worst, took)
	if batch {
		p.batches++
	}
	if took > l.timeout+loadMargin {
		l.over = append(l.over, fmt.Sprintf("%s during %s (%v)", took.Round(time.Millisecond), phase, err))
	}
	if err != nil {
		p.failed += len(idx)
		kind := failureKind(err)
		l.failures[kind] += len(idx)
		if _, ok := l.examples[kind]; !ok {
			l.examples[kind] = fmt.Sprintf("%v (during %s)", err, phase)
		}
	}
	l.mu.Unlock()
	for e, i := range idx {
		switch {
		case err != nil:
			co.failed[i].Add(1)
		case admitted(e):
			co.admitted[i].Add(1)
		}
	}
}

// redisErrorCode finds the code of a Redis error reply in a store error's
// text: "CLUSTERDOWN", "TRYAGAIN", "MOVED", "OOM"...
var redisErrorCode = regexp.MustCompile(`(?:^|: )([A-Z]{3,})\b`)

// failureKind names what a failed decision met: a timeout, or the Redis
// error code.
func failureKind(err error) string {
	msg := err.Error()
	if errors.Is(err, limiter.ErrTimeout) {
		return "timeout"
	}
	if m := redisErrorCode.FindStringSubmatch(msg); m != nil {
		return m[1]
	}
	return msg
}

// finish stops the senders and waits for them; it may be called again.
func (l *topologyLoad) finish() {
	l.stopOnce.Do(func() { close(l.stop) })
	l.wg.Wait()
}

// maxTimeoutShare is the share of decisions that may time out: none do on
// an idle machine, but on a loaded one (CI runs packages side by side on
// 2 cores) Redis or the gateway is now and then not scheduled for 100 ms,
// topology change or not. A refusal left unretried is never excused.
const maxTimeoutShare = 0.01

// settle logs the run (report), checks the counts (check) and fails the
// test for what went to on_error: any decision that failed with a refusal
// (refusals.go), and timeouts beyond maxTimeoutShare.
func (l *topologyLoad) settle(t *testing.T) {
	t.Helper()
	decisions, failed := l.report(t)
	timeouts := l.failures["timeout"]
	if refused := failed - timeouts; refused > 0 {
		t.Errorf("%d decisions failed with an error other than a timeout: each went to on_error", refused)
	}
	if float64(timeouts) > maxTimeoutShare*float64(decisions) {
		t.Errorf("%d of %d decisions timed out, over %.0f%%", timeouts, decisions, 100*maxTimeoutShare)
	}
	l.check(t, false)
}

// report logs each phase's decisions and failures, and returns the
// decisions that failed in all.
func (l *topologyLoad) report(t *testing.T) (decisions, failed int) {
	t.Helper()
	for _, name := range l.phases {
		p := l.byPhase[name]
		decisions += p.decisions
		failed += p.failed
		t.Logf("  %-34s %6d decisions (%4d batch sends), %3d failed; slowest %s", name, p.decisions, p.batches, p.failed, p.worst.Round(time.Millisecond))
	}
	kinds := make([]string, 0, len(l.failures))
	for k := range l.failures {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		t.Logf("  failed with %s: %d, e.g. %s", k, l.failures[k], l.examples[k])
	}
	t.Logf("  the gateways' clients met %s", l.refusals)
	t.Logf("  %d decisions, %d failed (to on_error); slowest %s (timeout %s); %d cohorts of %d recipients",
		decisions, failed, time.Duration(l.slowest.Load()).Round(time.Millisecond), l.timeout, len(l.cohorts), cohortSize)
	return decisions, failed
}

// check holds every recipient to its limit, as its senders saw it and as
// the store counts it (recipient_day, which no recipient reaches and
// whose window holds every send of the test), and every decision to the
// timeout. The store must count exactly the limit for every recipient
// sent enough, and exactly what its senders saw admitted, but for two
// measured exceptions: a decision that failed (timed out) may have run
// all the same, an over-count of at most the failures; and with mayLose
// (a forced failover) records the old master acknowledged may vanish,
// and the recipient is then admitted again, past its limit.
func (l *topologyLoad) check(t *testing.T, mayLose bool) {
	t.Helper()
	day := l.rules[1]
	ctx := context.Background()
	var wrong []string
	var exact, recipients, overCounted, lost, pastLimit int64
	for _, co := range l.cohorts {
		for i, who := range co.recipients {
			sent, admitted, failed := co.sent[i].Load(), co.admitted[i].Load(), co.failed[i].Load()
			if sent < cohortSends {
				continue // the last cohort may have just started
			}
			recipients++
			d, err := l.gateways[0].Usage(ctx, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": who}, day))
			if err != nil {
				t.Fatalf("usage of %s: %v", who, err)
			}
			counted := d.Results[0].Used
			pastLimit += max(0, admitted-loadLimit)
			lost += max(0, admitted-counted)
			overCounted += max(0, counted-admitted)
			switch {
			case admitted == loadLimit && counted == loadLimit:
				exact++
			case mayLose && counted == loadLimit && admitted > counted:
				// Records lost, the recipient admitted again: measured.
			case counted != loadLimit:
				wrong = append(wrong, fmt.Sprintf("%s: counted %d, want %d (admitted %d, sent %d, %d failed)", who, counted, loadLimit, admitted, sent, failed))
			case admitted > counted:
				wrong = append(wrong, fmt.Sprintf("%s: admitted %d, counted only %d: records lost (sent %d)", who, admitted, counted, sent))
			case counted-admitted > failed:
				wrong = append(wrong, fmt.Sprintf("%s: counted %d, admitted %d: more over-counts than the %d failed decisions", who, counted, admitted, failed))
			}
		}
	}
	t.Logf("  %d recipients sent at least %d times: %d admitted and counted exactly %d; %d records over-counted (decisions that failed yet ran), %d lost, %d admissions past the limit",
		recipients, cohortSends, exact, loadLimit, overCounted, lost, pastLimit)
	for i, w := range wrong {
		if i == 10 {
			t.Errorf("... %d recipients wrong in all", len(wrong))
			break
		}
		t.Error(w)
	}
	if len(l.over) > 0 {
		t.Errorf("%d decisions took longer than the timeout %s plus %s: %s", len(l.over), l.timeout, loadMargin, strings.Join(l.over[:min(5, len(l.over))], "; "))
	}
}

// refusalTally counts the errors a client's commands met, by Redis error
// code (MOVED, ASK, TRYAGAIN, CLUSTERDOWN...), whoever then handled them:
// go-redis (redirections) or the store (refusals.go).
type refusalTally struct {
	mu       sync.Mutex
	byCode   map[string]int
	examples map[string]string
}

func (r *refusalTally) note(cmds ...redis.Cmder) {
	for _, c := range cmds {
		err := c.Err()
		if err == nil || err == redis.Nil {
			continue
		}
		code := failureKind(err)
		if len(code) > 20 {
			code = code[:20]
		}
		r.mu.Lock()
		r.byCode[code]++
		if r.examples[code] == "" {
			r.examples[code] = err.Error()
		}
		r.mu.Unlock()
	}
}

// count is how many errors of code were met.
func (r *refusalTally) count(code string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byCode[code]
}

func (r *refusalTally) String() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.byCode) == 0 {
		return "no error"
	}
	codes := make([]string, 0, len(r.byCode))
	for c := range r.byCode {
		codes = append(codes, c)
	}
	sort.Strings(codes)
	var b strings.Builder
	for i, c := range codes {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "%s %d (%q)", c, r.byCode[c], r.examples[c])
	}
	return b.String()
}

// refusalHook is a node client's hook that notes its commands' errors.
type refusalHook struct{ r *refusalTally }

func (h refusalHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h refusalHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd)
		h.r.note(cmd)
		return err
	}
}

func (h refusalHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		h.r.note(cmds...)
		return err
	}
}
