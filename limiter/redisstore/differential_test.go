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
	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"
	"github.com/freqcap/caddy-freqcap/limiter/memstore"
)

// The memory store and the Redis store, fed the same seeded random
// sequences (hundreds of recipients, the seed config plus a calendar rule in
// the recipient's zone and a cost rule, refunds and time jumps; a limit per
// request, shadow checks and exempt requests), give the
// same answer decision by decision. Each Redis decision is made at random in
// Go or in the script, over the same values: the two read and write one
// format, and either may take over from the other at any time. Seed 4
// keeps to the rules on the recipient's key, so that on a server with SET
// … IFEQ the decisions in Go are written natively (a decision that also
// reads a campaign's key keeps commit.lua), and checks that they were.
func TestDifferentialMemoryVsRedis(t *testing.T) {
	client := redistest.Client(t)
	writePath := expectedPath(t, client, "freqcap-test:ifeq-probe", true)
	writes := &writeCounter{}
	client.AddHook(writes)
	zones := []*time.Location{nil, limitertest.MustZone(t, "Asia/Shanghai"), limitertest.MustZone(t, "America/New_York"), limitertest.MustZone(t, "Pacific/Kiritimati")}
	rules := differentialRules(t)
	deniedBy := map[string]bool{}
	defer func() {
		if !t.Failed() && len(deniedBy) != len(rules)-1 {
			t.Errorf("over all seeds only %v denied; every rule should", deniedBy)
		}
	}()
	for seed := int64(1); seed <= 4; seed++ {
		rules := rules
		if seed == 4 {
			rules = recipientRules(rules)
		}
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			writes.take("")
			if seed == 4 {
				defer func() { checkWrites(t, "decided in Go", writes.take(""), writePath) }()
			}
			rng := rand.New(rand.NewSource(seed))
			pick := rand.New(rand.NewSource(-seed))                                               // Go or script, apart from the sequence
			policy := rand.New(rand.NewSource(seed + 1000))                                       // tiers, shadows and exemptions, apart too
			clock := &limitertest.FixedClock{T: limitertest.MustParse(t, "2026-03-07T20:00:00Z")} // near New York's spring-forward
			mem := memstore.New(memstore.Options{Now: clock.Now, SweepInterval: -1})
			defer mem.Close()
			if err := client.FlushDB(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
			opts := Options{Now: clock.Now, Timeout: 5 * time.Second, Prefix: fmt.Sprintf("diff%d:", seed), GoBatchMin: 1}
			red := New(client, opts)
			defer red.Close()
			opts.ScriptOnly = true
			redScript := New(client, opts)
			defer redScript.Close()
			var ids []string
			lastWho, burst := "r0", 0
			var admitted, denied, refunded, waived int
			by := map[string]int{}
			for i := 0; i < 4000; i++ {
				switch x := rng.Intn(1000); {
				case x < 1:
					clock.T = clock.T.Add(time.Duration(rng.Intn(30)) * time.Hour)
				case x < 10:
					clock.T = clock.T.Add(time.Duration(rng.Intn(600)) * time.Second)
				default:
					clock.T = clock.T.Add(time.Duration(rng.Intn(800)) * time.Millisecond)
				}
				if len(ids) > 0 && rng.Intn(20) == 0 {
					id := ids[rng.Intn(len(ids))]
					a, errA := mem.Refund(context.Background(), id)
					b, errB := red.Refund(context.Background(), redisID(id, red.opts.Prefix))
					if a != b || errA != nil || errB != nil {
						t.Fatalf("step %d refund: memory %v %v, redis %v %v", i, a, errA, b, errB)
					}
					if a {
						refunded++
					}
					continue
				}
				// A few busy recipients hit every cap, the long tail few;
				// bursts retry one recipient with new content.
				who := fmt.Sprint("r", rng.Intn(rng.Intn(300)+1))
				if burst > 0 {
					who, burst = lastWho, burst-1
				} else if rng.Intn(40) == 0 {
					burst = rng.Intn(40)
				} else if rng.Intn(20) == 0 {
					who = "steady" // sends all day long: meets the daily cap
				}
				lastWho = who
				r := randomRequest(rng, rules, zones, clock.T, who)
				applyPolicy(policy, r, who)
				dm, errM := mem.Decide(context.Background(), r)
				decider := red
				if pick.Intn(2) == 0 {
					decider = redScript
				}
				dr, errR := decider.Decide(context.Background(), r)
				if errM != nil || errR != nil {
					t.Fatalf("step %d: memory err %v, redis err %v", i, errM, errR)
				}
				if !limitertest.SameDecision(dm, dr) {
					t.Fatalf("step %d at %s differ:\nmemory %s\nredis  %s", i, clock.T, limitertest.Describe(dm), limitertest.Describe(dr))
				}
				for _, res := range dm.Results {
					if res.Waived && res.Denied {
						waived++ // a shadow or an exemption that mattered
						break
					}
				}
				if dm.Allowed {
					admitted++
					if dm.ID() != "" {
						ids = append(ids, dm.ID())
					}
				} else {
					denied++
					for _, r := range dm.Results {
						if r.Denied {
							by[r.Rule.Name]++
						}
					}
				}
			}
			t.Logf("seed %d: %d admitted, %d denied %v, %d refunded, %d through a waived denial, identical", seed, admitted, denied, by, refunded, waived)
			if admitted == 0 || refunded == 0 || len(by) < 5 || waived == 0 {
				t.Fatalf("the sequence did not exercise admissions, refunds, waived denials and denials by most rules")
			}
			for name := range by {
				deniedBy[name] = true
			}
		})
	}
}

// differentialRules is the seed config, a calendar rule in the recipient's
// zone, a cost rule, campaign rules on other keys (one bucketed) and a tier
// rule with a limit per request.
func differentialRules(t *testing.T) []*limiter.Rule {
	return append(limitertest.SeedRules(),
		&limiter.Rule{Name: "channel_day", By: []string{"recipient", "channel"}, Limit: 10, Window: limiter.Window{Unit: limiter.Day, Zone: limitertest.MustZone(t, "Asia/Shanghai")}},
		&limiter.Rule{Name: "coins_month", By: []string{"recipient"}, Limit: 1000, Window: limiter.Window{Unit: limiter.Month}, Weight: "{json.amount}"},
		&limiter.Rule{Name: "campaign_hour", By: []string{"campaign"}, Limit: 250, Window: limiter.Window{Duration: time.Hour}},
		// Above BucketThreshold: a bucketed log (1 s buckets), merged
		// records and refunds from buckets. It is not meant to deny.
		&limiter.Rule{Name: "campaign_2h_bucketed", By: []string{"campaign", "channel"}, Limit: 1001, Window: limiter.Window{Duration: 2 * time.Hour}},
		// A limit per request (a tier), under a rule limit that only
		// bounds it, as limit {placeholder} configures: a bucketed log.
		&limiter.Rule{Name: "tier_hour", By: []string{"recipient", "campaign"}, Limit: 1 << 40, Window: limiter.Window{Duration: time.Hour}},
	)
}

func randomRequest(rng *rand.Rand, rules []*limiter.Rule, zones []*time.Location, now time.Time, who string) *limiter.Request {
	v := limitertest.Vals{
		"recipient": who,
		"content":   fmt.Sprint("c", rng.Intn(8)),
		"channel":   []string{"sms", "push", "email"}[rng.Intn(3)],
		"campaign":  fmt.Sprint("camp", rng.Intn(4)),
	}
	r := limitertest.Req(now, v, rules...)
	zone := zones[rng.Intn(len(zones))]
	amount := int64(rng.Intn(12))
	if rng.Intn(50) == 0 {
		amount = int64(rng.Intn(600))
	}
	for i := range r.Checks {
		switch r.Checks[i].Rule.Name {
		case "channel_day":
			r.Checks[i].Zone = zone
		case "coins_month":
			r.Checks[i].Cost = amount
		}
	}
	return r
}

// applyPolicy gives r sending policy at random: the tier rule a limit per
// recipient (now and then another tier), a shadow check now and then, and
// an exempt request now and then.
func applyPolicy(rng *rand.Rand, r *limiter.Request, who string) {
	tier := int64(len(who)%3*2 + 2) // 2, 4 or 6 an hour
	if who == "steady" {
		tier = 100 // the top tier: it meets the daily cap
	}
	if rng.Intn(50) == 0 {
		tier = int64(rng.Intn(8) + 1)
	}
	for i := range r.Checks {
		c := &r.Checks[i]
		if c.Rule.Name == "tier_hour" {
			c.Limit = tier
		}
		c.Shadow = rng.Intn(12) == 0
	}
	r.Exempt = rng.Intn(40) == 0
}

// redisID rewrites a memory-store admission id (keys without a prefix) into
// the Redis store's, so both refund the same admission.
func redisID(id, prefix string) string {
	recs, err := recordlog.DecodeID(id)
	if err != nil {
		return id
	}
	for i := range recs {
		recs[i].Key = prefix + recs[i].Key
	}
	return recordlog.EncodeID(recs)
}
