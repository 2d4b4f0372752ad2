package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
	"github.com/freqcap/caddy-freqcap/limiter/memstore"
)

// TestClusterNativeBatches runs batch sends on a 3-master cluster of the
// server under test: on masters with SET … IFEQ (Valkey 8.1) a batch
// send under BatchEach is decided in Go and written natively, two round
// trips a master; on others it stays in the script, one round trip a
// master, as before. See testClusterWritePaths.
func TestClusterNativeBatches(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	testClusterWritePaths(t, c, true)
}

// TestMixedClusterKeepsCounting runs the same on a cluster of mixed builds
// (FREQCAP_MIXED_SERVERS, node i on build i mod n), as during a rolling
// upgrade: each master on its own path, and every count exact.
func TestMixedClusterKeepsCounting(t *testing.T) {
	servers := redistest.MixedServers(t)
	c := redistest.StartClusterOf(t, 3, 0, servers...)
	testClusterWritePaths(t, c, false)
}

// clusterProbeKey returns a key that master m serves, for asking it
// directly.
func clusterProbeKey(t *testing.T, c *redistest.Cluster, m *redistest.Node) string {
	for i := 0; ; i++ {
		key := fmt.Sprintf("freqcap-test:ifeq-probe{%d}", i)
		if c.MasterOf(t, key).Addr == m.Addr {
			return key
		}
	}
}

// recipientsOn returns n recipients whose keys (under prefix) master m
// serves, named from stem.
func recipientsOn(t *testing.T, c *redistest.Cluster, m *redistest.Node, prefix, stem string, n int) []string {
	var out []string
	for i := 0; len(out) < n; i++ {
		who := fmt.Sprint(stem, i)
		if c.MasterOf(t, limiter.KeyFor(prefix, "recipient", who)).Addr == m.Addr {
			out = append(out, who)
		}
	}
	return out
}

// countingClusterClient returns a cluster client whose node clients count
// their writes in w, and run also(addr) on each as it is made.
func countingClusterClient(t *testing.T, c *redistest.Cluster, w *writeCounter, also func(n *redis.Client)) *redis.ClusterClient {
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { cl.Close() })
	cl.OnNewNode(func(n *redis.Client) {
		n.AddHook(nodeHook{w: w, node: n.Options().Addr})
		if also != nil {
			also(n)
		}
	})
	if err := cl.ForEachMaster(context.Background(), func(ctx context.Context, m *redis.Client) error {
		return freqcapScript.Load(ctx, m).Err()
	}); err != nil {
		t.Fatal(err)
	}
	return cl
}

// testClusterWritePaths holds a cluster's masters each to the write path
// the tests find for it themselves (redistest.HasSetIFEQ; with
// homogeneous, FREQCAP_EXPECT_WRITE_PATH too), and checks on it that batch
// sends answer as the memory store does, entry by entry; that a native
// master takes a batch send in two round trips, the read and the SET …
// NX or IFEQ writes, and a script master in one; that a key another
// gateway writes between the read and the write is caught by its own SET
// … IFEQ (or NX) and only its entries are decided again, in the script;
// and that two gateways sending overlapping batches and single sends
// count every admission exactly once.
func testClusterWritePaths(t *testing.T, c *redistest.Cluster, homogeneous bool) {
	ctx := context.Background()
	masters := c.Masters(t)
	want := map[string]WritePath{}
	var native, scripted []*redistest.Node
	for _, m := range masters {
		want[m.Addr] = expectedPath(t, m.Admin(), clusterProbeKey(t, c, m), homogeneous)
		if want[m.Addr] == WriteNative {
			native = append(native, m)
		} else {
			scripted = append(scripted, m)
		}
	}
	if !homogeneous && (len(native) == 0 || len(scripted) == 0) {
		t.Fatalf("%s should mix builds with and without SET IFEQ; the masters are %v", redistest.MixedEnv, want)
	}
	w := &writeCounter{}
	cl := countingClusterClient(t, c, w, nil)
	rule := &limiter.Rule{Name: "hour", By: []string{"recipient"}, Limit: 25, Window: limiter.Window{Duration: time.Hour}}

	t.Run("each master on its path", func(t *testing.T) {
		s := New(cl, Options{Prefix: "paths:", Timeout: 5 * time.Second})
		defer s.Close()
		paths, err := s.DetectWritePaths(ctx)
		if err != nil || len(paths) != len(masters) {
			t.Fatalf("DetectWritePaths = %+v, %v; want the %d masters", paths, err, len(masters))
		}
		for _, p := range paths {
			if p.Path != want[p.Node] {
				t.Errorf("%s: %s (%s); the tests find %s", p.Node, p.Path, p.Reason, want[p.Node])
			}
		}
	})

	t.Run("as memory", func(t *testing.T) {
		zones := []*time.Location{nil, limitertest.MustZone(t, "Asia/Shanghai"), limitertest.MustZone(t, "America/New_York")}
		clock := &limitertest.FixedClock{T: limitertest.MustParse(t, "2026-03-07T20:00:00Z")}
		mem := memstore.New(memstore.Options{Now: clock.Now, SweepInterval: -1})
		defer mem.Close()
		const prefix = "native-diff:"
		s := New(cl, Options{Now: clock.Now, Timeout: 5 * time.Second, Prefix: prefix})
		defer s.Close()
		for _, m := range masters {
			w.take(m.Addr)
		}
		runBatchDifferential(t, 5, clusterSeedRules(t), zones, clock, mem, s, prefix)
		for _, m := range masters {
			checkWrites(t, "master "+m.Addr, w.take(m.Addr), want[m.Addr])
		}
	})

	t.Run("two round trips a native master", func(t *testing.T) {
		const prefix = "native-trips:"
		s := New(cl, Options{Prefix: prefix, Timeout: 5 * time.Second})
		defer s.Close()
		if _, err := s.DetectWritePaths(ctx); err != nil {
			t.Fatal(err)
		}
		perMaster := map[string][]string{}
		var reqs []limiter.Request
		for _, m := range masters {
			perMaster[m.Addr] = recipientsOn(t, c, m, prefix, "t", 8)
			for _, who := range perMaster[m.Addr] {
				reqs = append(reqs, *limitertest.Req(time.Time{}, limitertest.Vals{"recipient": who}, rule))
			}
		}
		for round, kind := range []string{"set nx", "set ifeq"} {
			for _, m := range masters {
				w.take(m.Addr)
			}
			for i, d := range limitertest.MustBatch(t, s, reqs, limiter.BatchEach) {
				if !d.Allowed || !d.Recorded() {
					t.Fatalf("round %d entry %d: %s", round, i, limitertest.Describe(d))
				}
			}
			for _, m := range masters {
				n := w.take(m.Addr)
				switch want[m.Addr] {
				case WriteNative:
					// 3 round trips when the lane took the entries in two
					// batches (they queue one by one; see testClusterBatches).
					if n["round trips"] < 2 || n["round trips"] > 3 || n[kind] != 8 || n["freqcap"] != 0 {
						t.Errorf("native master %s, round %d: %v; want 2 round trips (3 when cut in two) carrying 8 %s, no script", m.Addr, round, n, kind)
					}
				default:
					if n["round trips"] < 2 || n["round trips"] > 3 || n["commit node"] != n["round trips"]-1 || n["commit"]+n["freqcap"] != 0 || n["set ifeq"]+n["set nx"] != 0 {
						t.Errorf("script master %s, round %d: %v; want 2 round trips, the second carrying one commit_node.lua run for the master's 8 keys (of 8 slots), no other script (3 and two runs when cut in two)", m.Addr, round, n)
					}
				}
			}
		}
		for _, who := range perMaster[masters[0].Addr] {
			if u := limitertest.MustUsage(t, s, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": who}, rule)); u.Results[0].Used != 2 {
				t.Errorf("%s counts %d, want 2", who, u.Results[0].Used)
			}
		}
	})

	t.Run("a changed key is caught by its own write", func(t *testing.T) {
		if len(native) == 0 {
			t.Skip("no master has SET IFEQ")
		}
		const prefix = "native-race:"
		a := native[0]
		onA := recipientsOn(t, c, a, prefix, "k", 5)
		other := New(c.Client(t), Options{Prefix: prefix, Timeout: 5 * time.Second, ScriptOnly: true})
		defer other.Close()
		known, fresh := onA[0], onA[1] // known exists at the read: SET … IFEQ; fresh does not: SET … NX
		limitertest.MustDecide(t, other, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": known}, rule))
		wa := &writeCounter{}
		race := countingClusterClient(t, c, wa, func(n *redis.Client) {
			if n.Options().Addr == a.Addr {
				n.AddHook(&beforeCommit{f: func() {
					limitertest.MustDecide(t, other, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": known}, rule))
					limitertest.MustDecide(t, other, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": fresh}, rule))
				}})
			}
		})
		s := New(race, Options{Prefix: prefix, Timeout: 5 * time.Second})
		defer s.Close()
		if _, err := s.DetectWritePaths(ctx); err != nil { // else its first batch goes to the script
			t.Fatal(err)
		}
		var reqs []limiter.Request
		var everyone []string
		for _, m := range masters {
			if m.Addr != a.Addr {
				everyone = append(everyone, recipientsOn(t, c, m, prefix, "k", 3)...)
			}
		}
		everyone = append(everyone, onA...)
		for _, who := range everyone {
			reqs = append(reqs, *limitertest.Req(time.Time{}, limitertest.Vals{"recipient": who}, rule))
		}
		reqs = append(reqs, *limitertest.Req(time.Time{}, limitertest.Vals{"recipient": known}, rule)) // twice
		for i, d := range limitertest.MustBatch(t, s, reqs, limiter.BatchEach) {
			if !d.Allowed {
				t.Fatalf("entry %d denied under a limit of 25: %s", i, limitertest.Describe(d))
			}
		}
		n := wa.take(a.Addr)
		if n["set ifeq"] != 1 || n["set nx"] != 4 || n["freqcap"] != 2 {
			t.Errorf("master %s: %v; want the 5 keys written natively (IFEQ for the known one), and the 2 changed ones' entries in 2 script runs", a.Addr, n)
		}
		if s.Conflicts() != 1 {
			t.Errorf("conflicts = %d, want 1", s.Conflicts())
		}
		for _, who := range everyone {
			want := int64(1)
			switch who {
			case known:
				want = 4 // before, the other gateway's, the batch's two
			case fresh:
				want = 2
			}
			if u := limitertest.MustUsage(t, s, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": who}, rule)); u.Results[0].Used != want {
				t.Errorf("%s counts %d, want %d", who, u.Results[0].Used, want)
			}
		}
	})

	t.Run("two gateways count exactly", func(t *testing.T) {
		const prefix = "native-two:"
		gateways := []*Store{
			New(c.Client(t), Options{Prefix: prefix, Timeout: 5 * time.Second}),
			New(c.Client(t), Options{Prefix: prefix, Timeout: 5 * time.Second}),
		}
		for _, g := range gateways {
			defer g.Close()
		}
		const crowd, senders, batches, size = 60, 4, 12, 40
		admitted := make([]atomic.Int64, crowd)
		var wg sync.WaitGroup
		errs := make(chan error, 2*senders)
		for g := range gateways {
			for sender := 0; sender < senders; sender++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for b := 0; b < batches; b++ {
						who := make([]int, size)
						reqs := make([]limiter.Request, size)
						for i := range reqs {
							who[i] = (g*7 + sender*13 + b*size + i*17) % crowd
							reqs[i] = *limitertest.Req(time.Time{}, limitertest.Vals{"recipient": fmt.Sprint("g", who[i])}, rule)
						}
						ds, err := gateways[g].DecideBatch(ctx, reqs, limiter.BatchEach)
						if err != nil {
							errs <- err
							return
						}
						for i, d := range ds {
							if d.Allowed {
								admitted[who[i]].Add(1)
							}
						}
						// and a single send now and then (in the script)
						d, err := gateways[g].Decide(ctx, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": fmt.Sprint("g", b%crowd)}, rule))
						if err != nil {
							errs <- err
							return
						}
						if d.Allowed {
							admitted[b%crowd].Add(1)
						}
					}
				}()
			}
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		total := int64(0)
		for i := range admitted {
			u := limitertest.MustUsage(t, gateways[0], limitertest.Req(time.Time{}, limitertest.Vals{"recipient": fmt.Sprint("g", i)}, rule))
			if got := admitted[i].Load(); u.Results[0].Used != got || got > rule.Limit {
				t.Errorf("g%d: %d admitted, %d counted, limit %d", i, got, u.Results[0].Used, rule.Limit)
			}
			total += admitted[i].Load()
		}
		t.Logf("%d admissions over %d recipients; conflicts %d and %d", total, crowd, gateways[0].Conflicts(), gateways[1].Conflicts())
	})
}

// TestMixedClusterUpgradeByFailover takes a cluster through the step of a
// rolling upgrade that changes a master's build: a master of a build
// without SET … IFEQ, a replica of one with it (from FREQCAP_MIXED_SERVERS),
// and a coordinated failover to the replica while batch sends under drop
// go on. Before, the master's batches are decided in the script; after,
// the new master, met at its own address, is asked and written natively.
// No admission is lost or doubled: each recipient counts at least what was
// admitted and at most that plus the decisions that failed during the
// switch (which may have landed).
func TestMixedClusterUpgradeByFailover(t *testing.T) {
	servers := redistest.MixedServers(t)
	var older, newer string
	for _, bin := range servers {
		srv := redistest.StartBuild(t, bin)
		probe := redis.NewClient(&redis.Options{Addr: srv.Addr})
		has := redistest.HasSetIFEQ(t, probe, "freqcap-test:ifeq-probe")
		probe.Close()
		srv.Stop()
		switch {
		case has && newer == "":
			newer = bin
		case !has && older == "":
			older = bin
		}
	}
	if older == "" || newer == "" {
		t.Fatalf("%s should list a build with SET IFEQ and one without", redistest.MixedEnv)
	}
	c := redistest.StartClusterOf(t, 1, 1, older, newer) // node 0 the master, node 1 its replica
	ctx := context.Background()
	const prefix = "upgrade:"
	// A limit the test never reaches, so that every entry is written.
	rule := &limiter.Rule{Name: "hour", By: []string{"recipient"}, Limit: 1_000_000, Window: limiter.Window{Duration: time.Hour}}
	w := &writeCounter{}
	cl := countingClusterClient(t, c, w, nil)
	s := New(cl, Options{Prefix: prefix, Timeout: 250 * time.Millisecond})
	defer s.Close()
	if paths, err := s.DetectWritePaths(ctx); err != nil || len(paths) != 1 || paths[0].Path != WriteScript {
		t.Fatalf("before the upgrade: %+v, %v; want the one master on the script path", paths, err)
	}

	const crowd = 30
	admitted := make([]atomic.Int64, crowd)
	failed := make([]atomic.Int64, crowd)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for b := 0; ; b++ {
				select {
				case <-stop:
					return
				default:
				}
				who := make([]int, 10)
				reqs := make([]limiter.Request, len(who))
				for i := range reqs {
					who[i] = (g*11 + b*len(who) + i*7) % crowd
					reqs[i] = *limitertest.Req(time.Time{}, limitertest.Vals{"recipient": fmt.Sprint("u", who[i])}, rule)
				}
				ds, err := s.DecideBatch(ctx, reqs, limiter.BatchEach)
				for i := range who {
					switch {
					case err != nil:
						failed[who[i]].Add(1)
					case ds[i].Allowed:
						admitted[who[i]].Add(1)
					}
				}
				time.Sleep(2 * time.Millisecond)
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	old, promoted, took := c.Failover(t, 0)
	t.Logf("failover %s (older build) -> %s (newer) in %s", old.Addr, promoted.Addr, took.Round(time.Millisecond))
	time.Sleep(500 * time.Millisecond)
	w.take(promoted.Addr)
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()

	if n := w.take(promoted.Addr); n["set ifeq"]+n["set nx"] == 0 {
		t.Errorf("after the failover the new master got %v; want native writes", n)
	}
	found := false
	for _, p := range s.WritePaths() {
		t.Logf("%s: %s (%s)", p.Node, p.Path, p.Reason)
		if p.Node == promoted.Addr {
			found = p.Path == WriteNative
		}
	}
	if !found {
		t.Errorf("WritePaths does not list the new master %s as native", promoted.Addr)
	}
	var total, lost int64
	for i := range admitted {
		u := limitertest.MustUsage(t, s, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": fmt.Sprint("u", i)}, rule))
		a, f, got := admitted[i].Load(), failed[i].Load(), u.Results[0].Used
		if got < a || got > a+f {
			t.Errorf("u%d: %d admitted, %d failed, %d counted", i, a, f, got)
		}
		total += a
		lost += f
	}
	t.Logf("%d admitted over %d recipients, %d entries failed during the switch", total, crowd, lost)
}
