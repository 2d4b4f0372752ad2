package redisstore

import (
	"context"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"
)

// This file is the Redis store on a cluster: a request's sections are split
// by hash tag, one script run per tag, run in parallel; each run reserves
// (decides and records) its part, and when any part denies or fails, the
// parts that recorded are refunded (rollback).

// isCluster reports whether client routes keys by slot, as a Redis Cluster
// client does: it can reach each master. A wrapper that hides this says so
// with Options.Cluster.
func isCluster(client Client) bool {
	_, ok := client.(interface {
		ForEachMaster(ctx context.Context, fn func(ctx context.Context, client *redis.Client) error) error
	})
	return ok
}

// callsByTag splits p into one call per hash tag, in the order of p's
// sections.
func (s *Store) callsByTag(p *limiter.Plan, op string, now int64) []*call {
	var out []*call
	tags := map[string]*call{}
	for si := range p.Sections {
		tag := hashTag(string(p.Key(&p.Sections[si])))
		c := tags[tag]
		if c == nil {
			c = &call{op: op, now: now, p: p, done: make(chan struct{}, 1)}
			tags[tag] = c
			out = append(out, c)
		}
		c.secs = append(c.secs, si)
	}
	return out
}

// hashTag is the part of key Redis Cluster hashes to find its slot.
func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// byTag groups n items by the hash tag of their keys on a cluster; off a
// cluster they are one group.
func (s *Store) byTag(n int, key func(int) string) [][]int {
	var groups [][]int
	index := map[string]int{}
	for i := 0; i < n; i++ {
		tag := ""
		if s.cluster {
			tag = hashTag(key(i))
		}
		gi, ok := index[tag]
		if !ok {
			gi = len(groups)
			index[tag] = gi
			groups = append(groups, nil)
		}
		groups[gi] = append(groups[gi], i)
	}
	return groups
}

// each runs f for 0..n-1, in parallel when n > 1: the groups of a cluster
// request are on different shards.
func (s *Store) each(n int, f func(int)) {
	if n == 1 {
		f(0)
		return
	}
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i)
		}()
	}
	wg.Wait()
}

// rollback refunds what the calls that admitted recorded, when another call
// of the same decision denied or failed. It has its own deadline: the
// caller's may be spent.
func (s *Store) rollback(p *limiter.Plan, calls []*call) {
	var recs []recordlog.Recorded
	for _, c := range calls {
		if c.err != nil || c.reply[0] != 1 {
			continue
		}
		for _, si := range c.secs {
			sec := &p.Sections[si]
			if sec.Recorded > 0 {
				recs = append(recs, recordlog.Recorded{Key: string(p.Key(sec)), Sub: string(p.Sub(sec)), Grain: sec.Grain, T: sec.Recorded, C: sec.Cost})
			}
		}
	}
	failed := false
	for _, c := range calls {
		failed = failed || c.err != nil
	}
	s.giveBack(recs, failed)
}

// giveBack refunds the reservations recs of a decision that denied or
// failed. After a denial it waits for the refund, so that the caller's
// next request does not meet its own reservation; after a failure the
// caller has waited its timeout already, and the refund goes on in the
// background, under a timeout of its own, so that no caller waits on the
// store longer than the timeout. A failed refund leaves a reservation
// that only over-counts, until its records leave their windows: never an
// over-admission.
func (s *Store) giveBack(recs []recordlog.Recorded, failed bool) {
	switch {
	case len(recs) == 0:
	case failed:
		go s.refund(context.Background(), recs)
	default:
		_, _ = s.refund(context.Background(), recs)
	}
}
