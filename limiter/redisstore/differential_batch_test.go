package redisstore

import (
	"context"
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
	"github.com/freqcap/caddy-freqcap/limiter/memstore"
)

// Batches, fed to the memory store and the Redis store in the same seeded
// random sequences (batches of 1 to 40 entries over a small crowd, so that
// recipients and contents repeat within a batch; either mode; the rules and
// policy of the single-decision differential test, campaign rules on other
// keys included; single decisions and refunds of batch entries between
// them), give the same answer entry by entry. Seed 3 keeps to the rules on
// the recipient's key, so that under BatchEach most entries are alone on
// their key: on a server with SET … IFEQ they are written natively (the
// campaign keys of seeds 1 and 2 join every entry into one component,
// which keeps commit.lua), and the test checks that they were.
func TestDifferentialBatches(t *testing.T) {
	client := redistest.Client(t)
	writePath := expectedPath(t, client, "freqcap-test:ifeq-probe", true)
	writes := &writeCounter{}
	client.AddHook(writes)
	zones := []*time.Location{nil, limitertest.MustZone(t, "Asia/Shanghai"), limitertest.MustZone(t, "America/New_York")}
	rules := differentialRules(t)
	for seed := int64(1); seed <= 3; seed++ {
		rules := rules
		if seed == 3 {
			rules = recipientRules(rules)
		}
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			writes.take("")
			if seed == 3 {
				defer func() { checkWrites(t, "batch sends decided in Go", writes.take(""), writePath) }()
			}
			clock := &limitertest.FixedClock{T: limitertest.MustParse(t, "2026-03-07T20:00:00Z")}
			mem := memstore.New(memstore.Options{Now: clock.Now, SweepInterval: -1})
			defer mem.Close()
			prefix := fmt.Sprintf("diffbatch%d:", seed)
			// Seed 1 decides in Go between a read and a compare-and-set
			// write, seed 2 in the script.
			red := New(client, Options{Now: clock.Now, Timeout: 5 * time.Second, Prefix: prefix, ScriptOnly: seed == 2})
			defer red.Close()
			runBatchDifferential(t, seed, rules, zones, clock, mem, red, prefix)
		})
	}
}

// runBatchDifferential drives mem and other (whose keys start with prefix)
// through the same random batches and fails at the first difference.
func runBatchDifferential(t *testing.T, seed int64, rules []*limiter.Rule, zones []*time.Location, clock *limitertest.FixedClock, mem, other limiter.Store, prefix string) {
	ctx := context.Background()
	rng := rand.New(rand.NewSource(seed))
	policy := rand.New(rand.NewSource(seed + 1000))
	var ids []string
	var admitted, denied, rejected, refunded int
	for step := 0; step < 300; step++ {
		clock.T = clock.T.Add(time.Duration(rng.Intn(30000)) * time.Millisecond)
		if len(ids) > 0 && rng.Intn(10) == 0 {
			id := ids[rng.Intn(len(ids))]
			a, errA := mem.Refund(ctx, id)
			b, errB := other.Refund(ctx, redisID(id, prefix))
			if a != b || errA != nil || errB != nil {
				t.Fatalf("step %d refund: memory %v %v, other %v %v", step, a, errA, b, errB)
			}
			if a {
				refunded++
			}
			continue
		}
		crowd := rng.Intn(20) + 1
		reqs := make([]limiter.Request, rng.Intn(40)+1)
		for i := range reqs {
			who := fmt.Sprint("r", rng.Intn(crowd))
			r := randomRequest(rng, rules, zones, clock.T, who)
			applyPolicy(policy, r, who)
			reqs[i] = *r
		}
		mode := limiter.BatchMode(rng.Intn(2))
		dm, errM := mem.DecideBatch(ctx, reqs, mode)
		dr, errR := other.DecideBatch(ctx, reqs, mode)
		if errM != nil || errR != nil {
			t.Fatalf("step %d: memory err %v, other err %v", step, errM, errR)
		}
		anyDenied := false
		for i := range dm {
			if !limitertest.SameDecision(dm[i], dr[i]) || dm[i].Recorded() != dr[i].Recorded() {
				t.Fatalf("step %d (%s, %d entries) entry %d differ:\nmemory %s recorded=%v\nother  %s recorded=%v",
					step, mode, len(reqs), i, limitertest.Describe(dm[i]), dm[i].Recorded(), limitertest.Describe(dr[i]), dr[i].Recorded())
			}
			if dm[i].Allowed {
				admitted++
			} else {
				denied++
				anyDenied = true
			}
			if dm[i].Recorded() {
				ids = append(ids, dm[i].ID())
			}
		}
		if anyDenied && mode == limiter.BatchAll {
			rejected++
		}
	}
	t.Logf("seed %d: %d entries admitted, %d denied, %d batches rejected whole, %d refunds, identical", seed, admitted, denied, rejected, refunded)
	if admitted == 0 || denied == 0 || rejected == 0 || refunded == 0 {
		t.Fatal("the sequence did not exercise admissions, denials, rejected batches and refunds")
	}
}
