package redisstore

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
	"github.com/freqcap/caddy-freqcap/limiter/memstore"
)

// tripCounter counts, per node, the round trips a cluster client makes
// (a pipeline is one) and the script commands it sends.
type tripCounter struct {
	mu    sync.Mutex
	trips map[string]int
	// writes counts the commands that write: scripts (freqcap.lua,
	// commit.lua) and SETs (native writes).
	writes map[string]int
}

func (tc *tripCounter) reset() {
	tc.mu.Lock()
	tc.trips, tc.writes = map[string]int{}, map[string]int{}
	tc.mu.Unlock()
}

func (tc *tripCounter) note(addr string, cmds ...redis.Cmder) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	tc.trips[addr]++
	for _, c := range cmds {
		if n := c.Name(); n == "evalsha" || n == "eval" || n == "set" {
			tc.writes[addr]++
		}
	}
}

type tripHook struct {
	tc   *tripCounter
	addr string
}

func (h tripHook) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h tripHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.tc.note(h.addr, cmd)
		return next(ctx, cmd)
	}
}

func (h tripHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.tc.note(h.addr, cmds...)
		return next(ctx, cmds)
	}
}

// testClusterBatches runs batches on a 3-master cluster.
func testClusterBatches(t *testing.T, c *redistest.Cluster) {
	ctx := context.Background()
	tc := &tripCounter{}
	tc.reset()
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
	defer cl.Close()
	cl.OnNewNode(func(n *redis.Client) { n.AddHook(tripHook{tc: tc, addr: n.Options().Addr}) })
	if err := cl.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		return freqcapScript.Load(ctx, m).Err()
	}); err != nil {
		t.Fatal(err)
	}

	// Decided entry by entry as the memory store decides them, for the
	// seed config and the calendar and cost rules beside it (every rule
	// starts with the recipient, so each entry is on one shard).
	t.Run("as memory", func(t *testing.T) {
		zones := []*time.Location{nil, limitertest.MustZone(t, "Asia/Shanghai"), limitertest.MustZone(t, "America/New_York")}
		clock := &limitertest.FixedClock{T: limitertest.MustParse(t, "2026-03-07T20:00:00Z")}
		mem := memstore.New(memstore.Options{Now: clock.Now, SweepInterval: -1})
		defer mem.Close()
		const prefix = "cbdiff:"
		s := New(cl, Options{Now: clock.Now, Timeout: 5 * time.Second, Prefix: prefix})
		runBatchDifferential(t, 7, clusterSeedRules(t), zones, clock, mem, s, prefix)
	})

	// Under BatchAll, a batch whose recipients lie on every shard and one
	// of which is full records nothing on any shard: each master decides
	// its entries in its lane and records the admitted ones, and they are
	// refunded once the denial is known (the read, the write, the refund).
	// The same batch without the full recipient is recorded whole, in two
	// round trips per master: the read, then the write (a SET … IFEQ a key
	// on a master that has it, else one commit_node.lua run for all of the
	// master's keys). The entries queue one by one, so a master's lane may
	// take its first entries before the rest are queued: then they are two
	// batches of the lane, the second's read riding with the first's write,
	// one round trip more. What is held is that the round trips do not
	// grow with the batch: 30 entries, at most one more than that.
	t.Run("all or nothing across shards, two round trips per node", func(t *testing.T) {
		const prefix = "cball:"
		rules := limitertest.SeedRules()
		s := New(cl, Options{Prefix: prefix, Timeout: 5 * time.Second})
		if _, err := s.DetectWritePaths(ctx); err != nil {
			t.Fatal(err) // asked now, not on the batch's round trips
		}
		var recipients []string
		perMaster := map[string]int{}
		for i := 0; len(recipients) < 30; i++ {
			who := fmt.Sprint("b", i)
			recipients = append(recipients, who)
			perMaster[c.MasterOf(t, limiter.KeyFor(prefix, "recipient", who)).Addr]++
		}
		if len(perMaster) != 3 {
			t.Fatalf("recipients spread over %v; want all three masters", perMaster)
		}
		full := recipients[len(recipients)-1]
		for i := 0; i < 15; i++ {
			limitertest.MustDecide(t, s, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": full, "content": fmt.Sprint(i)}, rules...))
		}
		batch := func(who []string) []limiter.Request {
			reqs := make([]limiter.Request, len(who))
			for i, w := range who {
				reqs[i] = *limitertest.Req(time.Time{}, limitertest.Vals{"recipient": w, "content": "launch"}, rules...)
			}
			return reqs
		}
		tc.reset()
		ds := limitertest.MustBatch(t, s, batch(recipients), limiter.BatchAll)
		for i, d := range ds {
			if d.Allowed != (i < len(recipients)-1) || d.Recorded() {
				t.Fatalf("entry %d: allowed %v recorded %v", i, d.Allowed, d.Recorded())
			}
		}
		tc.mu.Lock()
		for addr, n := range tc.trips {
			if n > 4 {
				t.Errorf("master %s: %d round trips for a rejected batch (%v); want at most 4 (read, write, refund, and a lane batch cut short)", addr, n, tc.trips)
			}
		}
		tc.mu.Unlock()
		for _, who := range recipients[:len(recipients)-1] {
			if u := limitertest.MustUsage(t, s, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": who, "content": "launch"}, rules...)); u.Results[0].Used != 0 {
				t.Fatalf("recipient %s: %d recorded after a rejected batch; want 0", who, u.Results[0].Used)
			}
		}

		tc.reset()
		ds = limitertest.MustBatch(t, s, batch(recipients[:len(recipients)-1]), limiter.BatchAll)
		for i, d := range ds {
			if !d.Allowed || !d.Recorded() {
				t.Fatalf("entry %d of an admitted batch: allowed %v recorded %v", i, d.Allowed, d.Recorded())
			}
		}
		tc.mu.Lock()
		trips, writes := tc.trips, tc.writes
		tc.mu.Unlock()
		if len(trips) != 3 {
			t.Fatalf("round trips by node %v; want all three masters", trips)
		}
		for addr, n := range trips {
			if n < 2 || n > 3 {
				t.Fatalf("master %s: %d round trips for one batch (%v); want 2 (3 when its lane took it in two batches)", addr, n, trips)
			}
		}
		for addr, n := range writes {
			if n > 2 && n != perMaster[addr]-map[bool]int{true: 1}[addr == c.MasterOf(t, limiter.KeyFor(prefix, "recipient", full)).Addr] {
				t.Fatalf("master %s: %d writes for its recipients (%v); want one run a lane batch, or one native SET a key", addr, n, perMaster)
			}
		}
		for _, who := range recipients[:len(recipients)-1] {
			if u := limitertest.MustUsage(t, s, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": who, "content": "launch"}, rules...)); u.Results[0].Used != 1 {
				t.Fatalf("recipient %s: %d recorded after an admitted batch; want 1", who, u.Results[0].Used)
			}
		}
	})

	// An entry over two shards (a campaign budget beside the recipient's
	// cap) is admitted only when both admit it; under BatchEach the
	// recipient's part of an entry the campaign denies is rolled back.
	t.Run("entries across shards", func(t *testing.T) {
		const prefix = "cbx:"
		budget := &limiter.Rule{Name: "campaign_budget", By: []string{"campaign"}, Limit: 3, Window: limiter.Window{Duration: time.Hour}}
		perRecipient := &limiter.Rule{Name: "recipient_minute", By: []string{"recipient"}, Limit: 15, Window: limiter.Window{Duration: time.Minute}}
		s := New(cl, Options{Prefix: prefix, Timeout: 5 * time.Second})
		campaignMaster := c.MasterOf(t, limiter.KeyFor(prefix, "campaign", "sale"))
		var recipients []string
		for i := 0; len(recipients) < 5; i++ {
			who := fmt.Sprint("x", i)
			if c.MasterOf(t, limiter.KeyFor(prefix, "recipient", who)) != campaignMaster {
				recipients = append(recipients, who)
			}
		}
		reqs := make([]limiter.Request, len(recipients))
		for i, who := range recipients {
			reqs[i] = *limitertest.Req(time.Time{}, limitertest.Vals{"recipient": who, "campaign": "sale"}, budget, perRecipient)
		}
		ds := limitertest.MustBatch(t, s, reqs, limiter.BatchEach)
		for i, d := range ds {
			if d.Allowed != (i < 3) {
				t.Fatalf("entry %d: %s; want allowed=%v", i, limitertest.Describe(d), i < 3)
			}
			u := limitertest.MustUsage(t, s, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": recipients[i], "campaign": "sale"}, perRecipient))
			if want := int64(map[bool]int{true: 1}[i < 3]); u.Results[0].Used != want {
				t.Fatalf("recipient %s: %d recorded; want %d (a denied entry's part is rolled back)", recipients[i], u.Results[0].Used, want)
			}
		}
	})
}
