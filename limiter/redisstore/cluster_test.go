package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// TestCluster runs the Redis store on a real 3-master Redis Cluster (one
// replica each, for the failover). The cluster takes a few seconds to form,
// so the cases share it, each under its own key prefix; the failover runs
// last because it changes the topology.
func TestCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3, 1)
	t.Run("seed config: one slot, one script run per recipient", func(t *testing.T) { testClusterOneSlot(t, c) })
	t.Run("cross-shard budget under concurrency", func(t *testing.T) { testClusterCrossShard(t, c) })
	t.Run("wrapped client", func(t *testing.T) { testClusterWrapped(t, c) })
	t.Run("batches", func(t *testing.T) { testClusterBatches(t, c) })
	t.Run("a master's write stops at a key elsewhere", func(t *testing.T) { testCommitNodeStopsAtAKeyElsewhere(t, c) })
	t.Run("what is held about a recipient", func(t *testing.T) { testClusterHeld(t, c) })
	t.Run("failover while deciding", func(t *testing.T) { testClusterFailover(t, c, "") })
	t.Run("forced failover while deciding", func(t *testing.T) { testClusterFailover(t, c, "FORCE") })
}

// clusterSeedRules is the seed config plus the other rule shapes of docs/configuration.md
// that start with the recipient: a calendar day per channel and a coins
// budget per calendar month.
func clusterSeedRules(t *testing.T) []*limiter.Rule {
	return append(limitertest.SeedRules(),
		&limiter.Rule{Name: "channel_day", By: []string{"recipient", "channel"}, Limit: 5, Window: limiter.Window{Unit: limiter.Day, Zone: limitertest.MustZone(t, "Asia/Shanghai")}},
		&limiter.Rule{Name: "coins_month", By: []string{"recipient"}, Limit: 1000, Window: limiter.Window{Unit: limiter.Month}, Weight: "{json.amount}"},
	)
}

// evalCounter counts the EVALSHA and EVAL commands a client sends, per
// node, as a hook on every node client: a MOVED redirection would show as a
// second command.
type evalCounter struct {
	mu     sync.Mutex
	byNode map[string]int
}

func (e *evalCounter) total() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, v := range e.byNode {
		n += v
	}
	return n
}

func (e *evalCounter) reset() {
	e.mu.Lock()
	e.byNode = map[string]int{}
	e.mu.Unlock()
}

type evalHook struct {
	e    *evalCounter
	addr string
}

func (h evalHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h evalHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.count(cmd)
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook counts the script runs of pipelines too: a run the
// store sends alone goes in a pipeline of its own (once.go).
func (h evalHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.count(cmds...)
		return next(ctx, cmds)
	}
}

func (h evalHook) count(cmds ...redis.Cmder) {
	for _, cmd := range cmds {
		if n := cmd.Name(); n == "evalsha" || n == "eval" {
			h.e.mu.Lock()
			h.e.byNode[h.addr]++
			h.e.mu.Unlock()
		}
	}
}

// scriptCalls sums, from INFO commandstats, the EVALSHA and EVAL calls a
// node executed or rejected since its last CONFIG RESETSTAT.
func scriptCalls(t *testing.T, n *redistest.Node) int {
	t.Helper()
	info, err := n.Admin().Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, line := range strings.Split(info, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok || (name != "cmdstat_evalsha" && name != "cmdstat_eval") {
			continue
		}
		for _, kv := range strings.Split(rest, ",") {
			k, v, _ := strings.Cut(kv, "=")
			if k == "calls" || k == "rejected_calls" || k == "failed_calls" {
				x, _ := strconv.Atoi(v)
				total += x
			}
		}
	}
	return total
}

// For the seed config (and the calendar and cost rules beside it), every
// rule about one recipient uses one key, that key's slot is the one Redis
// computes for the recipient's hash tag, and a decision is one script run on
// the master owning that slot: one EVALSHA sent by the client, one executed
// on that master, none anywhere else. Recipients full of braces, empty,
// non-ASCII or longer than 64 bytes included.
func testClusterOneSlot(t *testing.T, c *redistest.Cluster) {
	ctx := context.Background()
	const prefix = "slot:"
	rules := clusterSeedRules(t)
	counter := &evalCounter{byNode: map[string]int{}}
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
	defer cl.Close()
	cl.OnNewNode(func(n *redis.Client) { n.AddHook(evalHook{e: counter, addr: n.Options().Addr}) })
	s := New(cl, Options{Prefix: prefix, Timeout: 5 * time.Second})
	if err := cl.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		return freqcapScript.Load(ctx, m).Err()
	}); err != nil {
		t.Fatal(err)
	}
	masters := c.Masters(t)
	recipients := []string{"alice", "bob", "a}b{c", "{", "}", "", "白", strings.Repeat("z", 100), "x\x00y", "%7B", "{alice}"}
	perMaster := map[string]int{}
	const decisions = 3
	for _, who := range recipients {
		v := limitertest.Vals{"recipient": who, "content": "hello", "channel": "sms"}
		r := limitertest.Req(time.Time{}, v, rules...)
		for i := range r.Checks {
			if r.Checks[i].Rule.Weight != "" {
				r.Checks[i].Cost = 7
			}
		}
		keys := map[string]bool{}
		for _, rule := range rules {
			keys[limiter.KeyFor(prefix, rule.By[0], who)] = true
		}
		if len(keys) != 1 {
			t.Fatalf("recipient %q: %d keys %v; want one key for every rule", who, len(keys), keys)
		}
		key := limiter.KeyFor(prefix, "recipient", who)
		slot := c.KeySlot(t, key)
		if tag := hashTag(key); who != "" && c.KeySlot(t, "{"+tag+"}") != slot {
			t.Fatalf("recipient %q: key %q is not in the slot of its tag %q", who, key, tag)
		}
		owner := c.SlotOwner(t, slot)
		perMaster[owner.Addr]++

		for _, m := range masters {
			if err := m.Admin().ConfigResetStat(ctx).Err(); err != nil {
				t.Fatal(err)
			}
		}
		counter.reset()
		for i := 0; i < decisions; i++ {
			d, err := s.Decide(ctx, r)
			if err != nil {
				t.Fatalf("recipient %q: %v", who, err)
			}
			if want := i < 2; d.Allowed != want { // same_content_59s admits 2
				t.Fatalf("recipient %q decision %d: allowed %v, want %v", who, i, d.Allowed, want)
			}
		}
		if got := counter.total(); got != decisions {
			t.Fatalf("recipient %q: client sent %d script commands (%v) for %d decisions; want one each", who, got, counter.byNode, decisions)
		}
		for _, m := range masters {
			want := 0
			if m == owner {
				want = decisions
			}
			if got := scriptCalls(t, m); got != want {
				t.Fatalf("recipient %q (slot %d on %s): master %s ran %d scripts; want %d", who, slot, owner.Addr, m.Addr, got, want)
			}
		}
		if n, err := owner.Admin().Exists(ctx, key).Result(); err != nil || n != 1 {
			t.Fatalf("recipient %q: key %q not on its slot's master %s (%d, %v)", who, key, owner.Addr, n, err)
		}
		d, err := s.Usage(ctx, r)
		if err != nil {
			t.Fatal(err)
		}
		for i, res := range d.Results {
			want := int64(2)
			if r.Checks[i].Rule.Weight != "" {
				want = 14
			}
			if res.Used != want {
				t.Fatalf("recipient %q rule %s: used %d, want %d", who, res.Rule.Name, res.Used, want)
			}
		}
	}
	// Every key written is a recipient key on its own slot's master.
	total := 0
	for _, m := range masters {
		keys, err := m.Admin().Keys(ctx, prefix+"*").Result()
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range keys {
			if c.SlotOwner(t, c.KeySlot(t, k)) != m {
				t.Fatalf("key %q is on %s, not on its slot's master", k, m.Addr)
			}
		}
		total += len(keys)
	}
	if total != len(recipients) {
		t.Fatalf("%d keys for %d recipients; want one each", total, len(recipients))
	}
	t.Logf("%d recipients × %d decisions, one EVALSHA each on the slot's master; recipients per master: %v", len(recipients), decisions, perMaster)
}

// wrapped passes on only what the store needs of a client, as a wrapper
// that adds tracing or metrics might: it hides ForEachMaster.
type wrapped struct{ Client }

// A cluster client behind a wrapper is taken for what it is: detected when
// the wrapper keeps the cluster's methods, and said so by the Cluster
// option when it hides them. A decision over two hash tags on different
// slots then runs one script per tag; taken for a standalone client, it
// would send both keys in one command and fail with CROSSSLOT.
func testClusterWrapped(t *testing.T, c *redistest.Cluster) {
	ctx := context.Background()
	const prefix = "wrap:"
	budget := &limiter.Rule{Name: "campaign_budget", By: []string{"campaign"}, Limit: 2, Window: limiter.Window{Duration: time.Hour}}
	perRecipient := &limiter.Rule{Name: "recipient_minute", By: []string{"recipient"}, Limit: 5, Window: limiter.Window{Duration: time.Minute}}
	campaign := "summer"
	recipientSlot := c.KeySlot(t, limiter.KeyFor(prefix, "recipient", "ann"))
	for i := 0; c.KeySlot(t, limiter.KeyFor(prefix, "campaign", campaign)) == recipientSlot; i++ {
		campaign = fmt.Sprint("summer", i)
	}
	r := limitertest.Req(time.Time{}, limitertest.Vals{"campaign": campaign, "recipient": "ann"}, budget, perRecipient)

	cl := c.Client(t)
	embedded := struct{ *redis.ClusterClient }{cl}
	for _, tc := range []struct {
		name   string
		client Client
		opts   Options
		want   bool // taken for a cluster
	}{
		{"cluster client", cl, Options{}, true},
		{"wrapper keeping ForEachMaster", embedded, Options{}, true},
		{"wrapper hiding it, Cluster set", wrapped{cl}, Options{Cluster: true}, true},
		{"wrapper hiding it, Cluster unset", wrapped{cl}, Options{}, false},
	} {
		tc.opts.Prefix, tc.opts.Timeout = prefix+tc.name+":", 5*time.Second
		s := New(tc.client, tc.opts)
		if s.cluster != tc.want {
			s.Close()
			t.Fatalf("%s: taken for a cluster: %v, want %v", tc.name, s.cluster, tc.want)
		}
		d, err := s.Decide(ctx, r)
		s.Close()
		if !tc.want {
			if err == nil || !strings.Contains(err.Error(), "CROSSSLOT") {
				t.Fatalf("%s: taken for a standalone client, a decision over two slots: %v; want CROSSSLOT", tc.name, err)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !d.Allowed || d.Results[0].Used != 1 || d.Results[1].Used != 1 {
			t.Fatalf("%s: %s; want admitted, each rule used 1", tc.name, limitertest.Describe(d))
		}
	}
}

// A per-campaign budget (requests and coins) beside per-recipient caps,
// with the campaign's key on one master and every recipient's key on the
// two others, so every decision reserves on two shards. 32 goroutines × 10
// requests through two separate cluster clients (two gateways): no rule is
// ever over its limit, and every log holds exactly what was admitted, so
// no reservation of a denied or rolled-back request is left behind.
func testClusterCrossShard(t *testing.T, c *redistest.Cluster) {
	ctx := context.Background()
	const prefix = "xs:"
	budget := &limiter.Rule{Name: "campaign_budget", By: []string{"campaign"}, Limit: 40, Window: limiter.Window{Duration: time.Hour}}
	coins := &limiter.Rule{Name: "campaign_coins", By: []string{"campaign"}, Limit: 75, Window: limiter.Window{Unit: limiter.Day}, Weight: "{json.amount}"}
	perRecipient := &limiter.Rule{Name: "recipient_minute", By: []string{"recipient"}, Limit: 3, Window: limiter.Window{Duration: time.Minute}}
	sameContent := limitertest.SeedRules()[2] // 2 per recipient and content per 59 s

	const campaign = "spring-sale"
	campaignMaster := c.MasterOf(t, limiter.KeyFor(prefix, "campaign", campaign))
	var recipients []string
	spread := map[string]int{}
	for i := 0; len(recipients) < 25; i++ {
		who := fmt.Sprint("u", i)
		m := c.MasterOf(t, limiter.KeyFor(prefix, "recipient", who))
		if m == campaignMaster {
			continue
		}
		recipients = append(recipients, who)
		spread[m.Addr]++
	}
	if len(spread) != 2 {
		t.Fatalf("recipients spread over %v; want both masters other than the campaign's", spread)
	}

	mk := func(g, i int) *limiter.Request {
		n := g*10 + i
		r := limitertest.Req(time.Time{}, limitertest.Vals{"campaign": campaign, "recipient": recipients[n%25], "content": fmt.Sprint("c", n%3)},
			budget, coins, perRecipient, sameContent)
		r.Checks[1].Cost = int64(1 + n%5)
		return r
	}
	stores := []limiter.Store{
		New(c.Client(t), Options{Prefix: prefix, Timeout: 5 * time.Second}),
		New(c.Client(t), Options{Prefix: prefix, Timeout: 5 * time.Second}),
	}
	var admitted, coinsAdmitted, denied atomic.Int64
	deniedBy := make([]atomic.Int64, 4)
	var wg sync.WaitGroup
	errs := make(chan error, 32)
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[g%2]
			for i := 0; i < 10; i++ {
				r := mk(g, i)
				d, err := s.Decide(ctx, r)
				if err != nil {
					errs <- err
					return
				}
				if d.Allowed {
					admitted.Add(1)
					coinsAdmitted.Add(r.Checks[1].Cost)
				} else {
					denied.Add(1)
					deniedBy[d.Denier].Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("decide: %v", err)
	}
	adm, coinsAdm := admitted.Load(), coinsAdmitted.Load()
	if adm > budget.Limit || coinsAdm > coins.Limit {
		t.Fatalf("over-admitted: %d requests (limit %d), %d coins (limit %d)", adm, budget.Limit, coinsAdm, coins.Limit)
	}
	if adm == 0 {
		t.Fatal("nothing admitted")
	}

	s := stores[0]
	d, err := s.Usage(ctx, limitertest.Req(time.Time{}, limitertest.Vals{"campaign": campaign}, budget, coins))
	if err != nil {
		t.Fatal(err)
	}
	if d.Results[0].Used != adm || d.Results[1].Used != coinsAdm {
		t.Fatalf("campaign logs hold %d requests and %d coins; admitted %d and %d: reservations left behind",
			d.Results[0].Used, d.Results[1].Used, adm, coinsAdm)
	}
	var perUser, perContent int64
	for _, who := range recipients {
		d, err := s.Usage(ctx, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": who}, perRecipient))
		if err != nil {
			t.Fatal(err)
		}
		if d.Results[0].Used > perRecipient.Limit {
			t.Fatalf("recipient %s over its cap: %d", who, d.Results[0].Used)
		}
		perUser += d.Results[0].Used
		for k := 0; k < 3; k++ {
			d, err := s.Usage(ctx, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": who, "content": fmt.Sprint("c", k)}, sameContent))
			if err != nil {
				t.Fatal(err)
			}
			if d.Results[0].Used > sameContent.Limit {
				t.Fatalf("recipient %s content c%d over its cap: %d", who, k, d.Results[0].Used)
			}
			perContent += d.Results[0].Used
		}
	}
	if perUser != adm || perContent != adm {
		t.Fatalf("recipient logs hold %d, content logs %d; admitted %d: reservations left behind", perUser, perContent, adm)
	}
	t.Logf("320 decisions over 2 gateways: admitted %d (budget %d), %d coins (budget %d), denied %d (by budget %d, coins %d, recipient %d, content %d); recipients per master %v, campaign on %s",
		adm, budget.Limit, coinsAdm, coins.Limit, denied.Load(), deniedBy[0].Load(), deniedBy[1].Load(), deniedBy[2].Load(), deniedBy[3].Load(), spread, campaignMaster.Addr)
}

// A failover (CLUSTER FAILOVER on a replica, coordinated or FORCE) of the
// master that holds a set of recipients, while 8 goroutines keep deciding
// for them (and for a campaign budget on another master, so decisions also
// reserve across shards). Errors during the switch are allowed and
// counted; once the cluster agrees on the new master, every decision
// succeeds again without any intervention. The logs are then compared with
// what the clients saw: "lost" are admissions missing from the logs (none
// allowed after a coordinated failover, which waits for the replica to
// catch up; after a forced one, what the old master acknowledged but had
// not replicated is gone, and the test reports how much), "extra" are
// records of decisions that failed on the client (a timeout after the
// script ran; with on_error allow those requests passed anyway).
func testClusterFailover(t *testing.T, c *redistest.Cluster, option string) {
	ctx := context.Background()
	prefix := "fo" + strings.ToLower(option) + ":"
	// Limits far above what the test sends, so every decision that reaches
	// Redis is admitted and the logs count every admission.
	perRecipient := &limiter.Rule{Name: "recipient_hour", By: []string{"recipient"}, Limit: 1_000_000, Window: limiter.Window{Duration: time.Hour}}
	budget := &limiter.Rule{Name: "campaign_hour", By: []string{"campaign"}, Limit: 1_000_000, Window: limiter.Window{Duration: time.Hour}}

	target := c.MasterOf(t, limiter.KeyFor(prefix, "recipient", "f0"))
	var recipients []string
	for i := 0; len(recipients) < 10; i++ {
		who := fmt.Sprint("f", i)
		if c.MasterOf(t, limiter.KeyFor(prefix, "recipient", who)) == target {
			recipients = append(recipients, who)
		}
	}
	campaign := ""
	for i := 0; campaign == ""; i++ {
		if cand := fmt.Sprint("camp", i); c.MasterOf(t, limiter.KeyFor(prefix, "campaign", cand)) != target {
			campaign = cand
		}
	}
	const timeout = 250 * time.Millisecond
	s := New(c.Client(t), Options{Prefix: prefix, Timeout: timeout})

	// Phases: 0 before the failover, 1 during (from the command until the
	// cluster is ready again), 2 after.
	var phase atomic.Int32
	var ok, failed [3]atomic.Int64
	var okSolo [3]atomic.Int64
	var worst [3]atomic.Int64 // slowest decision, ns
	admittedBy := make([]atomic.Int64, len(recipients))
	var campaignAdmitted atomic.Int64
	var errMu sync.Mutex
	errKinds := map[string]int{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				ri := (g*7 + i) % len(recipients)
				rules := []*limiter.Rule{perRecipient}
				v := limitertest.Vals{"recipient": recipients[ri], "campaign": campaign}
				cross := i%2 == 0
				if cross {
					rules = append(rules, budget)
				}
				ph := phase.Load()
				start := time.Now()
				d, err := s.Decide(ctx, limitertest.Req(time.Time{}, v, rules...))
				el := time.Since(start).Nanoseconds()
				for {
					w := worst[ph].Load()
					if el <= w || worst[ph].CompareAndSwap(w, el) {
						break
					}
				}
				if err != nil {
					failed[ph].Add(1)
					kind := "store"
					if errors.Is(err, limiter.ErrTimeout) {
						kind = "timeout"
					}
					errMu.Lock()
					errKinds[kind]++
					if errKinds[kind] == 1 {
						t.Logf("first %s error (phase %d): %v", kind, ph, err)
					}
					errMu.Unlock()
					continue
				}
				if !d.Allowed {
					t.Errorf("denied under limits of a million: %+v", d.Results)
					continue
				}
				ok[ph].Add(1)
				if !cross {
					okSolo[ph].Add(1)
				}
				admittedBy[ri].Add(1)
				if cross {
					campaignAdmitted.Add(1)
				}
			}
		}()
	}

	time.Sleep(700 * time.Millisecond)
	slot := c.KeySlot(t, limiter.KeyFor(prefix, "recipient", recipients[0]))
	phase.Store(1)
	old, promoted, took := c.FailoverWith(t, slot, option)
	phase.Store(2)
	time.Sleep(700 * time.Millisecond)
	close(stop)
	wg.Wait()

	if ok[0].Load() == 0 {
		t.Fatal("no decision succeeded before the failover")
	}
	if c.SlotOwner(t, slot) != promoted {
		t.Fatalf("slot %d is not on the promoted replica %s", slot, promoted.Addr)
	}
	// After the failover every decision succeeds, on the new master.
	for _, n := range c.Nodes {
		if err := n.Admin().ConfigResetStat(ctx).Err(); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 50; i++ {
		d, err := s.Decide(ctx, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": recipients[i%len(recipients)], "campaign": campaign}, perRecipient, budget))
		if err != nil {
			t.Fatalf("decision %d after the failover: %v", i, err)
		}
		admittedBy[i%len(recipients)].Add(1)
		campaignAdmitted.Add(1)
		if !d.Allowed {
			t.Fatalf("decision %d after the failover denied", i)
		}
	}
	if n := scriptCalls(t, promoted); n < 50 {
		t.Fatalf("the promoted master ran %d scripts for 50 decisions", n)
	}
	if n := scriptCalls(t, old); n != 0 {
		t.Fatalf("the old master still ran %d scripts after the failover", n)
	}

	var lost, extra int64
	for i, who := range recipients {
		d, err := s.Usage(ctx, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": who}, perRecipient))
		if err != nil {
			t.Fatal(err)
		}
		diff := d.Results[0].Used - admittedBy[i].Load()
		if diff < 0 {
			lost -= diff
		} else {
			extra += diff
		}
	}
	d, err := s.Usage(ctx, limitertest.Req(time.Time{}, limitertest.Vals{"campaign": campaign}, budget))
	if err != nil {
		t.Fatal(err)
	}
	campaignDiff := d.Results[0].Used - campaignAdmitted.Load()
	totalFailed := failed[0].Load() + failed[1].Load() + failed[2].Load()
	t.Logf("failover %q of %s to %s took %s (command to new master owning the slot); timeout %s", option, old.Addr, promoted.Addr, took, timeout)
	for ph, name := range []string{"before", "during", "after"} {
		t.Logf("  %-6s: %d ok (%d single-shard), %d failed, slowest %s", name, ok[ph].Load(), okSolo[ph].Load(), failed[ph].Load(), time.Duration(worst[ph].Load()).Round(time.Millisecond))
	}
	t.Logf("  errors by kind %v; recipient logs vs admitted: %d lost, %d extra; campaign log minus admitted: %+d", errKinds, lost, extra, campaignDiff)
	if lost != 0 && option == "" {
		t.Errorf("%d admitted decisions are missing from the logs after a coordinated failover", lost)
	}
	if extra > totalFailed {
		t.Errorf("%d extra records but only %d failed decisions", extra, totalFailed)
	}
	if campaignDiff < 0 || campaignDiff > totalFailed {
		t.Errorf("campaign log is off by %+d with %d failed decisions", campaignDiff, totalFailed)
	}
}

// testClusterHeld lists, reads and resets what the cluster holds about
// recipients whose keys live on different masters: Held finds each of
// their logs (every content, a long one by its hash), History and Usage
// read one through Check.Sub, and a Reset through it forgets that log
// alone.
func testClusterHeld(t *testing.T, c *redistest.Cluster) {
	ctx := context.Background()
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
	defer cl.Close()
	s := New(cl, Options{Prefix: "held:", Timeout: 5 * time.Second, Cluster: true})
	defer s.Close()
	rules := limitertest.SeedRules()
	long := strings.Repeat("a body long enough to be hashed ", 3)
	for _, who := range []string{"alice", "bob", "carol", "dave"} {
		for _, content := range []string{"hi", long} {
			limitertest.MustDecide(t, s, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": who, "content": content}, rules...))
		}
		held, err := s.Held(ctx, "recipient", who, time.Time{})
		if err != nil || len(held) != 3 {
			t.Fatalf("%s: held %+v, %v; want her own log and two contents", who, held, err)
		}
		var hashed limiter.HeldLog
		for _, h := range held {
			if len(h.Hashed) == 1 {
				hashed = h
			}
		}
		check := limiter.Check{Rule: rules[2], Values: []string{who, hashed.Values["content"]}, Sub: hashed.Sub}
		sends, err := s.History(ctx, &limiter.Request{Checks: []limiter.Check{check}})
		if err != nil || len(sends[0].Times) != 1 {
			t.Fatalf("%s: history through Sub: %+v, %v", who, sends, err)
		}
		if err := s.Reset(ctx, &limiter.Request{Checks: []limiter.Check{check}}); err != nil {
			t.Fatal(err)
		}
		if d := limitertest.MustUsage(t, s, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": who, "content": long}, rules[2])); d.Results[0].Used != 0 {
			t.Errorf("%s: the hashed content counts %d after its reset", who, d.Results[0].Used)
		}
		if d := limitertest.MustUsage(t, s, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": who, "content": "hi"}, rules[2])); d.Results[0].Used != 1 {
			t.Errorf("%s: the other content counts %d, want 1", who, d.Results[0].Used)
		}
	}
}
