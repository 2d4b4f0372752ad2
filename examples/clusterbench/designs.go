package main

import (
	"fmt"
	"math/rand"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/lease"
)

// design is one way of deciding the data set.
type design struct {
	name string
	// onCluster decides on the cluster (or with sharded on as many
	// standalone servers as it has masters), once for each -masters count;
	// otherwise on the standalone server.
	onCluster bool
	// sharded decides single sends on standalone servers, as many as the
	// cluster's masters and on the same core, each recipient's on the
	// server its number picks, through a store a server (sharding done by
	// the gateway): a control that tells what the cluster costs from what
	// splitting the same callers over several servers on one core costs.
	sharded bool
	// ref names the standalone design that a cluster design's Redis CPU a
	// decision is compared with, run by run; "" for a reference itself.
	ref string
	// batch sends -batch entries at a time through DecideBatch under mode;
	// otherwise one Decide a send.
	batch bool
	mode  limiter.BatchMode
	// campaign and coupon add the campaign or the coupon budget to the
	// seed config.
	campaign, coupon bool
	// lease decides through a lease store (limiter/lease) over the Redis
	// store, the coupon budget leased in blocks of -lease units.
	lease bool
}

// designs are every design, in the order the default -designs runs them:
// each reference just before what is compared with it.
var designs = []design{
	{name: "standalone"},
	{name: "seed", onCluster: true, ref: "standalone"},
	{name: "sharded", onCluster: true, sharded: true, ref: "standalone"},
	{name: "seed+campaign", onCluster: true, ref: "standalone", campaign: true},
	{name: "seed+coupon", onCluster: true, ref: "standalone", coupon: true, lease: true},
	{name: "seed+coupon-unleased", onCluster: true, ref: "standalone", coupon: true},
	{name: "standalone-batch", batch: true, mode: limiter.BatchAll},
	{name: "batch-all", onCluster: true, ref: "standalone-batch", batch: true, mode: limiter.BatchAll},
	{name: "standalone-batch-each", batch: true, mode: limiter.BatchEach},
	{name: "batch-each", onCluster: true, ref: "standalone-batch-each", batch: true, mode: limiter.BatchEach},
}

func designNamed(name string) *design {
	for i := range designs {
		if designs[i].name == name {
			return &designs[i]
		}
	}
	return nil
}

func designNames() string {
	names := make([]string, len(designs))
	for i, d := range designs {
		names[i] = d.name
	}
	return strings.Join(names, ", ")
}

// chooseDesigns parses -designs. A cluster design's reference is run too,
// just before it, when the list does not name it: a ratio needs both in the
// same runs. added lists the references so added.
func chooseDesigns(list string) (chosen []*design, added []string, err error) {
	var named []*design
	for _, name := range strings.Split(list, ",") {
		name = strings.TrimSpace(name)
		d := designNamed(name)
		if d == nil {
			return nil, nil, fmt.Errorf("-designs: unknown design %q (known: %s)", name, designNames())
		}
		for _, n := range named {
			if n == d {
				return nil, nil, fmt.Errorf("-designs: %s listed twice", name)
			}
		}
		named = append(named, d)
	}
	has := func(name string) bool {
		for _, d := range chosen {
			if d.name == name {
				return true
			}
		}
		for _, d := range named {
			if d.name == name {
				return true
			}
		}
		return false
	}
	for _, d := range named {
		if d.ref != "" && !has(d.ref) {
			chosen = append(chosen, designNamed(d.ref))
			added = append(added, d.ref)
		}
		chosen = append(chosen, d)
	}
	return chosen, added, nil
}

// send is one decision of the data set.
type send struct {
	at        time.Time
	recipient int
	content   int
}

// makeData is redisbench's data set: sends per recipient at random times
// of one day, contents of their own, in time order.
func makeData(recipients, perRecipient, contents int) []send {
	rng := rand.New(rand.NewSource(1))
	day := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	out := make([]send, 0, recipients*perRecipient)
	for r := 0; r < recipients; r++ {
		for i := 0; i < perRecipient; i++ {
			out = append(out, send{at: day.Add(time.Duration(rng.Int63n(int64(24 * time.Hour)))), recipient: r, content: rng.Intn(contents)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out
}

// couponCode is the seeds' coupon: one value, so one key, for every
// recipient.
const couponCode = "coupon123456"

// couponKey is the key the store keeps the coupon budget in.
func couponKey() string { return limiter.KeyFor(keyPrefix, "coupon", couponCode) }

// rules are the seed config and the budgets a design may add to it.
type rules struct {
	seed     []*limiter.Rule
	campaign *limiter.Rule
	coupon   *limiter.Rule
	// leased is coupon with Lease set.
	leased *limiter.Rule
}

func newRules(couponLimit, block int64) (*rules, error) {
	rs := &rules{
		seed: []*limiter.Rule{
			{Name: "recipient_minute", By: []string{"recipient"}, Limit: 15, Window: limiter.Window{Duration: time.Minute}},
			{Name: "recipient_day", By: []string{"recipient"}, Limit: 50, Window: limiter.Window{Duration: 24 * time.Hour}},
			{Name: "same_content_59s", By: []string{"recipient", "content"}, Limit: 2, Window: limiter.Window{Duration: 59 * time.Second}},
			{Name: "same_content_59m", By: []string{"recipient", "content"}, Limit: 5, Window: limiter.Window{Duration: 59 * time.Minute}},
		},
		campaign: &limiter.Rule{Name: "campaign_day", By: []string{"campaign"}, Limit: 1_000_000_000, Window: limiter.Window{Duration: 24 * time.Hour}},
		// A calendar day in UTC (a nil Zone), as the seeds write it.
		coupon: &limiter.Rule{Name: "coupon_day", By: []string{"coupon"}, Limit: couponLimit, Window: limiter.Window{Unit: limiter.Day}},
	}
	leased := *rs.coupon
	leased.Lease = block
	rs.leased = &leased
	for _, r := range append(rs.seed, rs.campaign, rs.coupon) {
		if err := r.Validate(); err != nil {
			return nil, err
		}
	}
	if err := lease.CheckRules(append(rs.seed, rs.leased)); err != nil {
		return nil, fmt.Errorf("-lease: %w", err)
	}
	return rs, nil
}

// request builds s's request under design d.
func (rs *rules) request(s send, d *design) limiter.Request {
	who, what := "r"+strconv.Itoa(s.recipient), "c"+strconv.Itoa(s.content)
	r := limiter.Request{Now: s.at, Checks: make([]limiter.Check, 0, len(rs.seed)+1)}
	for _, rule := range rs.seed {
		c := limiter.Check{Rule: rule, Cost: 1, Values: []string{who}}
		if len(rule.By) == 2 {
			c.Values = append(c.Values, what)
		}
		r.Checks = append(r.Checks, c)
	}
	if d.campaign {
		r.Checks = append(r.Checks, limiter.Check{Rule: rs.campaign, Cost: 1, Values: []string{"camp" + strconv.Itoa(s.recipient%10)}})
	}
	if d.coupon {
		rule := rs.coupon
		if d.lease {
			rule = rs.leased
		}
		r.Checks = append(r.Checks, limiter.Check{Rule: rule, Cost: 1, Values: []string{couponCode}})
	}
	return r
}
