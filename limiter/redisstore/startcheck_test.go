package redisstore

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
	"github.com/freqcap/caddy-freqcap/limiter/memstore"
)

// leastPrivilege is the ACL user of docs/operations.md: aclRules, and on a
// cluster what the cluster client sends besides: CLUSTER SLOTS (the slot
// map) and ASKING (before following an ASK redirection while a slot
// moves).
func leastPrivilege(cluster bool) []string {
	rules := append([]string{}, aclRules...)
	if cluster {
		rules = append(rules, "+cluster|slots", "+asking")
	}
	return rules
}

// checkStore builds a store from cfg, as the Caddy module does, and runs
// CheckStart on it.
func checkStore(t *testing.T, cfg Config, prefix string) StartCheck {
	t.Helper()
	s, _ := newConfiguredStore(t, cfg, prefix)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return s.CheckStart(ctx)
}

// A user missing one of the permissions the store needs is told at start
// which command, and on which keys: each rule of the least-privilege user
// taken away in turn, then a key pattern that misses the prefix. The user
// with all of them gets no refusal; a server that cannot be reached, or
// refuses the password, is reported as such.
func TestCheckStartNamesWhatIsRefused(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	cfg := Config{Addresses: []string{srv.Addr}, Username: "gw", Password: "secret", Timeout: time.Second}

	if err := aclSetUser(ctx, admin, "gw", leastPrivilege(false)...); err != nil {
		t.Fatal(err)
	}
	check := checkStore(t, cfg, "freqcap:")
	if check.Err != nil || len(check.Nodes) != 1 || len(check.Nodes[0].Refused) != 0 {
		t.Fatalf("the least-privilege user: %+v; want one node, nothing refused", check)
	}
	if n := check.Nodes[0]; n.EvictionPolicy != "" || n.PolicyErr == nil {
		t.Errorf("the least-privilege user read the eviction policy (%q, %v): INFO and CONFIG GET should be refused", n.EvictionPolicy, n.PolicyErr)
	}

	for _, c := range []struct {
		take     string // the rule taken away
		command  string // what the check must name
		inScript bool
		keyed    bool
	}{
		{"-time", "time", false, false},
		{"-mget", "mget", false, true},
		{"-evalsha", "evalsha", false, true},
		{"-eval", "eval", false, true},
		{"-get", "get", true, true},
		{"-set", "set", true, true},
		{"-del", "del", true, true},
	} {
		t.Run(c.take, func(t *testing.T) {
			if err := aclSetUser(ctx, admin, "gw", append([]string{"reset"}, append(leastPrivilege(false), c.take)...)...); err != nil {
				t.Fatal(err)
			}
			check := checkStore(t, cfg, "freqcap:")
			if check.Err != nil || len(check.Nodes) != 1 {
				t.Fatalf("check: %+v", check)
			}
			found := false
			for _, r := range check.Nodes[0].Refused {
				if r.Command == c.command && (!c.keyed || r.Keys == "freqcap:*") && (r.InScript == c.inScript || !c.inScript) {
					found = true
				}
			}
			if !found {
				t.Errorf("without %s the check reported %v; want %s refused%s", c.take, check.Nodes[0].Refused, c.command, map[bool]string{true: " on keys freqcap:*"}[c.keyed])
			}
			t.Logf("%s: %v", c.take, check.Nodes[0].Refused)
		})
	}

	t.Run("key pattern outside the prefix", func(t *testing.T) {
		rules := append([]string{"reset"}, leastPrivilege(false)...)
		for i, r := range rules {
			if r == "~freqcap:*" {
				rules[i] = "~other:*"
			}
		}
		if err := aclSetUser(ctx, admin, "gw", rules...); err != nil {
			t.Fatal(err)
		}
		check := checkStore(t, cfg, "freqcap:")
		var keyed []string
		for _, r := range check.Nodes[0].Refused {
			if r.Keys == "freqcap:*" {
				keyed = append(keyed, r.Command)
			}
		}
		if len(keyed) == 0 {
			t.Fatalf("a user whose keys are other:* was refused nothing on freqcap:*: %+v", check)
		}
		t.Logf("refused on freqcap:*: %v", keyed)
	})

	t.Run("wrong password", func(t *testing.T) {
		bad := cfg
		bad.Password = "wrong"
		if check := checkStore(t, bad, "freqcap:"); check.Err == nil {
			t.Fatalf("a refused password went unreported: %+v", check)
		} else {
			t.Logf("reported: %v", check.Err)
		}
	})

	t.Run("unreachable", func(t *testing.T) {
		down := redistest.Start(t)
		down.Stop()
		check := checkStore(t, Config{Addresses: []string{down.Addr}, Timeout: 100 * time.Millisecond}, "freqcap:")
		if check.Err == nil {
			t.Fatalf("an unreachable server went unreported: %+v", check)
		}
		t.Logf("reported: %v", check.Err)
	})
}

// A server that answers the connection's setup with a refusal is refused
// at start, not taken for unreachable: the least-privilege user with a db
// setting (go-redis sends SELECT first, which that user may not run), and
// a db the server does not have. Each fails every command for good, so
// under on_error allow it would leave every cap off.
func TestCheckStartRefusesTheSetup(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	if err := aclSetUser(ctx, admin, "gw", leastPrivilege(false)...); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		cfg  Config
	}{
		{"select refused", Config{Addresses: []string{srv.Addr}, Username: "gw", Password: "secret", Timeout: time.Second, DB: 1}},
		{"no such db", Config{Addresses: []string{srv.Addr}, Timeout: time.Second, DB: 99}},
	} {
		t.Run(c.name, func(t *testing.T) {
			check := checkStore(t, c.cfg, "freqcap:")
			refusals := check.Refusals()
			if check.Err != nil || len(refusals) != 1 || len(refusals[0].Refused) != 1 || refusals[0].Refused[0].Command != "select" {
				t.Fatalf("check: %+v, refusals %v; want select refused", check, refusals)
			}
			t.Logf("refused: %v", refusals[0])
		})
	}
	// The same user may select once it is allowed to.
	if err := aclSetUser(ctx, admin, "gw", append(leastPrivilege(false), "+select")...); err != nil {
		t.Fatal(err)
	}
	check := checkStore(t, Config{Addresses: []string{srv.Addr}, Username: "gw", Password: "secret", Timeout: time.Second, DB: 1}, "freqcap:")
	if check.Err != nil || len(check.Refusals()) != 0 {
		t.Fatalf("with +select: %+v, refusals %v; want none", check, check.Refusals())
	}
}

// The check reads the eviction policy when the user may run INFO (or
// CONFIG GET), and EvictsCounts tells the safe one, noeviction, from the
// others: every key the store writes has a TTL, so volatile-* evicts
// counts as allkeys-* does.
func TestCheckStartReadsEvictionPolicy(t *testing.T) {
	for _, c := range []struct {
		policy string
		evicts bool
	}{
		{"noeviction", false},
		{"volatile-lru", true},
		{"volatile-ttl", true},
		{"allkeys-lru", true},
		{"allkeys-lfu", true},
	} {
		t.Run(c.policy, func(t *testing.T) {
			srv := redistest.Start(t, "--maxmemory", "64mb", "--maxmemory-policy", c.policy)
			check := checkStore(t, Config{Addresses: []string{srv.Addr}, Timeout: time.Second}, "freqcap:")
			if check.Err != nil || len(check.Nodes) != 1 {
				t.Fatalf("check: %+v", check)
			}
			n := check.Nodes[0]
			if n.EvictionPolicy != c.policy || n.MaxMemory != 64<<20 || n.Server == "" {
				t.Fatalf("read policy %q, maxmemory %d, server %q; want %q, %d and a version", n.EvictionPolicy, n.MaxMemory, n.Server, c.policy, 64<<20)
			}
			if EvictsCounts(n.EvictionPolicy) != c.evicts {
				t.Errorf("EvictsCounts(%q) = %v", c.policy, !c.evicts)
			}
		})
	}
	if EvictsCounts("") {
		t.Error("an unknown policy counts as evicting")
	}

	// With CONFIG GET allowed but INFO refused, the policy still shows.
	srv := redistest.Start(t, "--maxmemory-policy", "allkeys-lru")
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	if err := aclSetUser(context.Background(), admin, "gw", append(leastPrivilege(false), "+config|get")...); err != nil {
		t.Fatal(err)
	}
	check := checkStore(t, Config{Addresses: []string{srv.Addr}, Username: "gw", Password: "secret", Timeout: time.Second}, "freqcap:")
	if p := check.Nodes[0].EvictionPolicy; p != "allkeys-lru" {
		t.Errorf("through CONFIG GET: policy %q (%v)", p, check.Nodes[0].PolicyErr)
	}
}

// The least-privilege user of docs/operations.md runs the engine on every
// deployment: standalone (decided in Go, and in the script), Sentinel and
// a 3-master cluster. On each, the start check finds nothing refused, a
// seed round (decisions on the server's clock, a refund, usage, a reset)
// passes, also after SCRIPT FLUSH (EVAL), and the random batch sequences
// of the differential test (both modes, refunds, campaign rules on other
// keys, on a cluster across shards) answer as the memory store does. On
// the cluster a decision is also made while its slot is half moved, so
// that go-redis follows an ASK redirection (ASKING).
func TestLeastPrivilegeUser(t *testing.T) {
	ctx := context.Background()
	zones := []*time.Location{nil, limitertest.MustZone(t, "Asia/Shanghai")}
	suite := func(t *testing.T, cfg Config, prefix string, scriptOnly bool, admins []*redis.Client) {
		t.Helper()
		cfg.Username, cfg.Password, cfg.Timeout = "gw", "secret", 2*time.Second
		for _, a := range admins {
			if err := aclSetUser(ctx, a, "gw", leastPrivilege(cfg.Cluster)...); err != nil {
				t.Fatalf("ACL SETUSER on %s: %v", a.Options().Addr, err)
			}
		}
		client, err := cfg.NewClient()
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { client.Close() })
		s := New(client, Options{Prefix: prefix, Timeout: cfg.Timeout, ScriptOnly: scriptOnly})
		t.Cleanup(func() { s.Close() })
		check := s.CheckStart(ctx)
		if check.Err != nil {
			t.Fatalf("start check: %v", check.Err)
		}
		for _, n := range check.Nodes {
			if len(n.Refused) > 0 {
				t.Errorf("start check on %s: refused %v", n.Node, n.Refused)
			}
		}
		if !cfg.Cluster && cfg.SentinelMaster == "" && !scriptOnly {
			// COMMAND DOCS is granted: the user finds SET IFEQ where the
			// server has it, and writes natively there.
			want := expectedPath(t, admins[0], prefix+"probe", true)
			if paths, err := s.DetectWritePaths(ctx); err != nil || len(paths) != 1 || paths[0].Path != want {
				t.Errorf("write paths %v, %v; want one node on %s", paths, err, want)
			}
		}
		seedRound(t, s, "alice")
		for _, a := range admins {
			if err := a.ScriptFlush(ctx).Err(); err != nil && !strings.Contains(err.Error(), "READONLY") {
				t.Fatalf("SCRIPT FLUSH: %v", err)
			}
		}
		seedRound(t, s, "bob")

		clock := &limitertest.FixedClock{T: limitertest.MustParse(t, "2026-03-07T20:00:00Z")}
		mem := memstore.New(memstore.Options{Now: clock.Now, SweepInterval: -1})
		defer mem.Close()
		clocked := New(client, Options{Prefix: prefix + "diff:", Now: clock.Now, Timeout: cfg.Timeout, ScriptOnly: scriptOnly})
		defer clocked.Close()
		runBatchDifferential(t, 11, clusterSeedRules(t), zones, clock, mem, clocked, prefix+"diff:")
	}

	t.Run("standalone", func(t *testing.T) {
		srv := redistest.Start(t)
		admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
		defer admin.Close()
		for _, scriptOnly := range []bool{false, true} {
			t.Run(fmt.Sprint("script_only=", scriptOnly), func(t *testing.T) {
				suite(t, Config{Addresses: []string{srv.Addr}, ScriptOnly: scriptOnly}, fmt.Sprintf("freqcap:%v:", scriptOnly), scriptOnly, []*redis.Client{admin})
			})
		}
	})

	t.Run("sentinel", func(t *testing.T) {
		st := redistest.StartSentinel(t)
		var admins []*redis.Client
		for _, srv := range []*redistest.Server{st.Master, st.Replica} {
			a := redis.NewClient(&redis.Options{Addr: srv.Addr})
			defer a.Close()
			admins = append(admins, a)
		}
		suite(t, Config{Addresses: []string{st.Addr}, SentinelMaster: st.MasterName}, "freqcap:", false, admins)
	})

	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t, 3, 0)
		var admins []*redis.Client
		for _, n := range c.Nodes {
			admins = append(admins, n.Admin())
		}
		cfg := Config{Addresses: c.Addrs(), Cluster: true}
		suite(t, cfg, "freqcap:", false, admins)

		// A decision on a key whose slot is half moved: the key has gone
		// to the target, so the source answers ASK.
		cfg.Username, cfg.Password, cfg.Timeout = "gw", "secret", 2*time.Second
		s, _ := newConfiguredStore(t, cfg, "freqcap:")
		r := limitertest.Req(time.Time{}, limitertest.Vals{"recipient": "carol", "content": "hi"}, limitertest.SeedRules()...)
		if _, err := s.Decide(ctx, r); err != nil {
			t.Fatal(err)
		}
		slot := c.KeySlot(t, limiter.KeyFor("freqcap:", "recipient", "carol"))
		from := c.SlotOwner(t, slot)
		var to *redistest.Node
		for _, m := range c.Masters(t) {
			if m != from {
				to = m
				break
			}
		}
		moved := make(chan struct{})
		go func() {
			defer close(moved)
			c.MoveSlot(t, slot, to, 300*time.Millisecond)
		}()
		time.Sleep(450 * time.Millisecond) // the key has moved; the slot is still migrating
		d, err := s.Decide(ctx, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": "carol", "content": "hi"}, limitertest.SeedRules()...))
		<-moved
		if err != nil || !d.Allowed || d.Results[2].Used != 2 {
			t.Fatalf("a decision while the slot moved: %v, %+v; want the second admission of the content", err, d)
		}

		// Without what only a cluster needs, the start check says so.
		for _, c := range []struct{ take, command string }{{"-asking", "asking"}, {"-cluster|slots", "cluster|slots"}} {
			for _, a := range admins {
				if err := aclSetUser(ctx, a, "gw", append(leastPrivilege(true), c.take)...); err != nil {
					t.Fatal(err)
				}
			}
			check := checkStore(t, cfg, "freqcap:")
			found := false
			for _, n := range check.Nodes {
				for _, r := range n.Refused {
					found = found || r.Command == c.command
				}
			}
			if !found {
				t.Errorf("without %s the start check found %+v; want %s named", c.take, check, c.command)
			}
		}
	})
}

// A server that answers but does not serve yet is an outage at start,
// not a refusal: a cluster missing a slot's master answers CLUSTERDOWN,
// and each master is then unanswered (the load went on to say "grant the
// user what the store needs", and failed).
func TestCheckStartClusterDown(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	for _, m := range c.Masters(t) {
		if err := m.Admin().Do(context.Background(), "CLUSTER", "DELSLOTS", "0").Err(); err != nil && !strings.Contains(err.Error(), "already unassigned") {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, _ := c.Masters(t)[0].Admin().ClusterInfo(context.Background()).Result()
		if strings.Contains(info, "cluster_state:fail") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cluster stayed up without slot 0: %s", info)
		}
		time.Sleep(50 * time.Millisecond)
	}
	check := checkStore(t, Config{Addresses: c.Addrs(), Cluster: true, Timeout: time.Second}, "freqcap:")
	if rs := check.Refusals(); len(rs) != 0 {
		t.Fatalf("a cluster that is down was refused: %v", rs)
	}
	for _, n := range check.Nodes {
		if !notServing(n.Err) {
			t.Errorf("node %s: %v, want CLUSTERDOWN as its error", n.Node, n.Err)
		}
	}
}
