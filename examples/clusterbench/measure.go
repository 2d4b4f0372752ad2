package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/lease"
	"github.com/freqcap/caddy-freqcap/limiter/redisstore"
)

// keyPrefix starts every key the bench's store writes.
const keyPrefix = "bench:"

// result is one run of one design.
type result struct {
	rate      float64 // decisions a second, measured
	cpuMicros float64 // the nodes' CPU a decision, summed
	// insideMicros is the µs a decision executing commands, and wakeups
	// the event-loop cycles a decision, summed over the nodes (-1: not
	// known): see usage.
	insideMicros, wakeups float64
	redisBusy             float64 // the nodes' CPU a second of the run, summed
	perNode               []float64
	// couponNode is the node that holds the coupon key; -1 when the
	// design has no coupon, or no node holds it.
	couponNode int
	p50, p99   time.Duration
}

func (r result) couponShare() float64 {
	if r.couponNode < 0 {
		return -1
	}
	return r.perNode[r.couponNode]
}

// measure replays data through a store on c as design d, from cfg.callers
// callers, each taking the next send (or the next cfg.batch of them) in
// time order.
func measure(ctx context.Context, c *cluster, d *design, data []send, cfg *config, logger *log.Logger) (result, error) {
	rc := redisstore.Config{Addresses: c.addrs(), Cluster: c.clustered, Timeout: 2 * time.Second}
	if !c.clustered {
		rc.Addresses = rc.Addresses[:1]
	}
	client, err := rc.NewClient()
	if err != nil {
		return result{}, err
	}
	defer client.Close()
	rs := redisstore.New(client, redisstore.Options{Prefix: keyPrefix, Timeout: 2 * time.Second})
	defer rs.Close()
	var s limiter.Store = rs
	// shards: with d.sharded a store a server, each recipient's decisions
	// on the server its number picks.
	shards := []limiter.Store{rs}
	if d.sharded {
		for _, addr := range c.addrs()[1:] {
			rc := redisstore.Config{Addresses: []string{addr}, Timeout: 2 * time.Second}
			client, err := rc.NewClient()
			if err != nil {
				return result{}, err
			}
			defer client.Close()
			shard := redisstore.New(client, redisstore.Options{Prefix: keyPrefix, Timeout: 2 * time.Second})
			defer shard.Close()
			shards = append(shards, shard)
		}
	}
	// clock is the data set's time: the latest send handed out. A lease's
	// term is measured on it, as the requests carry it (a day replays in
	// seconds).
	var clock atomic.Int64
	var ls *lease.Store
	if d.lease {
		ls = lease.New(rs, lease.Options{KeepInnerOpen: true, Term: cfg.leaseTerm, Now: func() time.Time { return time.UnixMilli(clock.Load()) }})
		defer ls.Close()
		s = ls
	}
	step := 1
	if d.batch {
		step = cfg.batch
	}
	var next, failed atomic.Int64
	var firstErr error
	var once sync.Once
	lat := make([][]time.Duration, cfg.callers)
	before, err := c.usage(ctx)
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	var wg sync.WaitGroup
	for g := 0; g < cfg.callers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(int64(step))) - step
				if i >= len(data) {
					return
				}
				for at := data[i].at.UnixMilli(); ; {
					seen := clock.Load()
					if seen >= at || clock.CompareAndSwap(seen, at) {
						break
					}
				}
				t0 := time.Now()
				var err error
				if d.batch {
					// A batch of its own each time: a call cut short by its
					// timeout may leave the store reading it.
					reqs := make([]limiter.Request, 0, step)
					for _, sd := range data[i:min(i+step, len(data))] {
						reqs = append(reqs, cfg.rules.request(sd, d))
					}
					_, err = s.DecideBatch(ctx, reqs, d.mode)
				} else {
					r := cfg.rules.request(data[i], d)
					on := s
					if d.sharded {
						on = shards[data[i].recipient%len(shards)]
					}
					_, err = on.Decide(ctx, &r)
				}
				lat[g] = append(lat[g], time.Since(t0))
				if err != nil {
					failed.Add(1)
					once.Do(func() { firstErr = err })
				}
			}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	if ls != nil {
		// Before the counts are read: it gives back the blocks it holds,
		// part of what leasing costs.
		ls.Close()
	}
	if ctx.Err() != nil {
		return result{}, context.Cause(ctx)
	}
	if n := failed.Load(); n > 0 {
		return result{}, fmt.Errorf("%d calls failed, the first: %w", n, firstErr)
	}
	after, err := c.usage(ctx)
	if err != nil {
		return result{}, err
	}
	if os.Getenv("CLUSTERBENCH_STATS") != "" {
		st, _ := c.nodes[0].admin.Info(ctx, "commandstats").Result()
		logger.Printf("%s commandstats of %s:\n%s", d.name, c.nodes[0].addr, st)
	}
	var total, inside, wakeups float64
	for i := range after {
		total += after[i].cpu - before[i].cpu
		inside = addKnown(inside, after[i].inside, before[i].inside)
		wakeups = addKnown(wakeups, after[i].wakeups, before[i].wakeups)
	}
	r := result{rate: float64(len(data)) / wall.Seconds(), couponNode: -1}
	for i := range after {
		r.perNode = append(r.perNode, (after[i].cpu-before[i].cpu)/total)
	}
	r.cpuMicros = total / float64(len(data)) * 1e6
	r.insideMicros, r.wakeups = -1, -1
	if inside >= 0 {
		r.insideMicros = inside / float64(len(data))
	}
	if wakeups >= 0 {
		r.wakeups = wakeups / float64(len(data))
	}
	r.redisBusy = total / wall.Seconds()
	if d.coupon {
		if r.couponNode, err = c.holding(ctx, couponKey()); err != nil {
			return result{}, err
		}
		if r.couponNode < 0 {
			logger.Printf("warning: %s: no node holds %s after the run: the coupon master's share is unknown", d.name, couponKey())
		}
	}
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	r.p50, r.p99 = all[len(all)/2].Round(time.Microsecond), all[len(all)*99/100].Round(time.Microsecond)
	return r, nil
}

// addKnown adds after − before to sum, a figure -1 meaning unknown: one
// node that does not say makes the sum unknown.
func addKnown(sum, after, before float64) float64 {
	if sum < 0 || after < 0 || before < 0 {
		return -1
	}
	return sum + after - before
}
