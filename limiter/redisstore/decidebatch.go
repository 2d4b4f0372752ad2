package redisstore

import (
	"context"
	"fmt"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"
	"github.com/freqcap/caddy-freqcap/lua"
)

// This file is the Redis store's batch decision: the entries of a batch
// send, decided in order in freqcap.lua, one script run per hash tag (one
// off a cluster), the runs of a cluster sent in one pipeline, which
// go-redis splits into one round trip per node. A batch does not go
// through the batcher: it is already a batch, and its entries must stay
// in order and together.
//
// Under BatchAll each run is all or nothing in itself (OP_DECIDE_ALL: with
// a denial the script writes nothing), so off a cluster a batch is exactly
// as atomic as one decision. On a cluster, the runs that admitted every
// entry have recorded them; when another run denied, they are refunded
// (reserve and roll back, as for one decision across shards). An entry
// whose keys span several hash tags is decided in each of their runs and
// admitted when all of them admit it; under BatchEach the parts that
// recorded are refunded when one does not. Between the runs and the
// refund, other decisions (and the later entries of the same run) see
// those reservations: they may be denied for them, never admitted past a
// limit.

// DecideBatch implements Store.
func (s *Store) DecideBatch(ctx context.Context, reqs []limiter.Request, mode limiter.BatchMode) ([]*limiter.Decision, error) {
	ds, err := s.decideBatch(ctx, reqs, mode)
	s.followFailover(err)
	return ds, err
}

func (s *Store) decideBatch(ctx context.Context, reqs []limiter.Request, mode limiter.BatchMode) ([]*limiter.Decision, error) {
	if err := limiter.CheckBatch(reqs, mode); err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	plans := make([]*limiter.Plan, len(reqs))
	inFlight := false // a run that timed out may still read the plans
	defer func() {
		if inFlight {
			return // leave them to the GC
		}
		for _, p := range plans {
			if p != nil {
				p.Release()
			}
		}
	}()
	op := opDecide
	if mode == limiter.BatchAll {
		op = opDecideAll
	}
	entryCalls := make([][]*call, len(reqs))
	var all []*call // every entry's calls, in order
	var whole *wholeCalls
	if !s.cluster {
		whole = newWholeCalls(len(reqs))
		all = make([]*call, len(reqs))
	}
	for i := range reqs {
		nowArg, approx := s.nowArg(&reqs[i])
		p := limiter.GetPlan()
		plans[i] = p
		if err := p.Build(s.opts.Prefix, &reqs[i], approx); err != nil {
			return nil, fmt.Errorf("batch entry %d: %w", i, err)
		}
		if s.cluster {
			entryCalls[i] = s.callsByTag(p, op, nowArg)
			all = append(all, entryCalls[i]...)
		} else {
			all[i] = whole.add(p, op, nowArg)
			entryCalls[i] = all[i : i+1 : i+1]
		}
	}
	// One script run a hash tag (one off a cluster), the entries in order.
	var groups [][]*call
	for _, g := range s.byTag(len(all), func(i int) string { return string(all[i].p.Key(&all[i].p.Sections[all[i].secs[0]])) }) {
		calls := make([]*call, len(g))
		for k, i := range g {
			calls[k] = all[i]
		}
		groups = append(groups, calls)
	}

	if _, ok := s.masterLanes(); ok {
		if settled, err := s.decideInLanes(ctx, entryCalls, groups); err != nil {
			inFlight = true
			// A batch that fails records nothing: what the masters that
			// answered recorded is given back once every call is settled
			// (a probe's batches answered 503 while one master stalled
			// stayed counted on the others).
			go func() {
				s.rollbackEntries(plans, entryCalls, groups, func(int) bool { return true }, settled())
			}()
			return nil, err
		}
	} else if s.cluster || s.opts.ScriptOnly || s.hotBatch(groups[0], mode) {
		runCtx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		s.runGroups(runCtx, groups)
		cancel()
	} else if err := s.decideBatchInGo(ctx, groups[0], mode == limiter.BatchEach); err != nil {
		inFlight = true
		return nil, err
	}

	ds := make([]*limiter.Decision, len(reqs))
	slab := limiter.NewDecisionSlab(len(reqs))
	var firstErr error
	for i, calls := range entryCalls {
		p := plans[i]
		p.Raw = append(p.Raw[:0], make([]recordlog.RawResult, len(p.Rules))...)
		admitted := true
		var now int64
		for _, c := range calls {
			if c.err != nil {
				firstErr = cmpErr(firstErr, c.err)
				admitted = false
				continue
			}
			admitted = admitted && c.reply[0] == 1
			if now == 0 {
				now = c.at
			}
			c.unpackReply(p)
		}
		if firstErr == nil {
			ds[i] = p.FinishFrom(slab, &reqs[i], now, admitted)
		}
	}
	undo := func(i int) bool { return firstErr != nil || !ds[i].Allowed }
	if firstErr == nil && mode == limiter.BatchAll && limiter.AnyDenied(ds) {
		undo = func(int) bool { return true }
		limiter.ForgetIDs(ds)
	}
	s.rollbackEntries(plans, entryCalls, groups, undo, nil)
	if firstErr != nil {
		return nil, firstErr
	}
	return ds, nil
}

// hotBatch reports whether a batch send off a cluster goes to the script
// for its hot keys (see hotKeys). Under BatchAll one hot key is enough: a
// conflict sends the whole batch to the script after a wasted read. Under
// BatchEach only a batch whose entries mostly read hot keys does: a
// conflict sends only the entries sharing keys with the changed one there
// (see decidedInGo), so one hot recipient does not cost the other entries
// the script.
func (s *Store) hotBatch(calls []*call, mode limiter.BatchMode) bool {
	if mode == limiter.BatchAll {
		return s.hot.touches(calls)
	}
	return 2*s.hot.touching(calls, true) > len(calls)
}

// decideBatchInGo decides the calls of a batch off a cluster as the
// batcher decides a batch of concurrent decisions (godecide.go): one
// round trip reads every key, the entries are decided in Go, and a second
// writes them with a compare-and-set (none when nothing was admitted, or,
// under OP_DECIDE_ALL, when anything was denied); a key changed in between
// sends the batch to the script, or with perComponent (BatchEach) only the
// entries that share keys with it (see decidedInGo). A batch send of this
// store that shares a key with it waits for it first (keyLeases). It waits
// at most the store's timeout, or until ctx ends.
func (s *Store) decideBatchInGo(ctx context.Context, calls []*call, perComponent bool) error {
	return s.underLeases(ctx, calls, func() {
		if held := s.roundTrip(nil, calls, perComponent); held != nil {
			s.roundTrip(held, nil, false)
		}
	})
}

// underLeases runs write once this store's leases on the keys of calls
// are held (keyLeases: batch sends that share a key take turns on it),
// and waits for it at most the store's timeout, or until ctx ends. The
// leases end when write has returned, even after the caller has stopped
// waiting; write must land or fail by itself.
func (s *Store) underLeases(ctx context.Context, calls []*call, write func()) error {
	waitCtx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	// gaveUp is the error once waitCtx has ended: the caller's, or the
	// store's timeout.
	gaveUp := func() error {
		if err := ctx.Err(); err != nil {
			return classify(err)
		}
		return s.timedOut()
	}
	ls, err := s.leases.acquire(waitCtx, calls)
	if err != nil {
		return gaveUp()
	}
	if err := ctx.Err(); err != nil {
		// The caller is gone: what the batch recorded would be answered
		// as failed and never given back.
		s.leases.release(ls)
		return classify(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer s.leases.release(ls)
		write()
	}()
	select {
	case <-done:
		return nil
	case <-waitCtx.Done():
		// The writes may still land: an over-count until their records
		// leave their windows, never an over-admission.
		return gaveUp()
	}
}

// runGroups runs each group of calls as one script run: off a cluster
// directly, on a cluster all in one pipeline (go-redis sends it as one
// round trip per node).
func (s *Store) runGroups(ctx context.Context, groups [][]*call) {
	var runs []scriptRun
	var runCalls [][]*call
	for _, g := range groups {
		keys, args, ok := runArgsOf(g)
		if !ok {
			// Too many rule specs or keys for one run: runCalls splits
			// it, each part recording what it admits, for
			// rollbackEntries to take back.
			s.runCalls(ctx, g)
			continue
		}
		runs = append(runs, scriptRun{keys: keys, args: args})
		runCalls = append(runCalls, g)
	}
	s.runAll(ctx, runs)
	for i, r := range runs {
		hand(runCalls[i], r.rep, r.err)
	}
}

// scriptRun is one freqcap.lua run of runAll: its KEYS and ARGV, then its
// reply.
type scriptRun struct {
	keys []string
	args []any
	rep  []int64
	err  error
}

// runAllOnce runs the scripts: one alone directly, more in one pipeline,
// which go-redis sends as one round trip per node on a cluster. runAll
// (refusals.go) calls it again for the runs Redis refused.
func (s *Store) runAllOnce(ctx context.Context, runs []scriptRun) {
	switch len(runs) {
	case 0:
		return
	case 1:
		runs[0].rep, runs[0].err = s.run(ctx, runs[0].keys, runs[0].args)
		return
	}
	cmds := make([]*redis.Cmd, len(runs))
	_, _ = s.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i := range runs {
			cmds[i] = s.evalShaIn(ctx, pipe, freqcapScript.Hash(), runs[i].keys, runs[i].args...)
		}
		return nil
	})
	for i := range runs {
		r := &runs[i]
		v, err := cmds[i].Result()
		if err != nil && strings.Contains(err.Error(), "NOSCRIPT") {
			// The script cache was emptied (a restart, a new master):
			// nothing ran. Run loads it again.
			v, err = s.evalScript(ctx, lua.Freqcap, r.keys, r.args...).Result()
		}
		if err != nil {
			r.err = classify(err)
		} else {
			r.rep, r.err = scriptInts(v)
		}
	}
}

// rollbackEntries refunds what the calls of the entries undo picks
// recorded: an admitted call recorded unless it ran under OP_DECIDE_ALL in
// a run with a denial; a call in unanswered (nil: none) is left alone. It
// has its own deadline: the caller's may be spent.
func (s *Store) rollbackEntries(plans []*limiter.Plan, entryCalls [][]*call, groups [][]*call, undo func(int) bool, unanswered map[*call]bool) {
	admitted := func(c *call) bool { return !unanswered[c] && c.err == nil && c.reply[0] == 1 }
	written := map[*call]bool{}
	for _, g := range groups {
		all := true
		for _, c := range g {
			all = all && admitted(c)
		}
		for _, c := range g {
			written[c] = admitted(c) && (c.op == opDecide || all)
		}
	}
	var recs []recordlog.Recorded
	for i, calls := range entryCalls {
		if !undo(i) {
			continue
		}
		p := plans[i]
		for _, c := range calls {
			if !written[c] {
				continue
			}
			for k, si := range c.secs {
				sec := &p.Sections[si]
				if t := c.reply[1+k]; t > 0 {
					recs = append(recs, recordlog.Recorded{Key: string(p.Key(sec)), Sub: string(p.Sub(sec)), Grain: sec.Grain, T: t, C: sec.Cost})
				}
			}
		}
	}
	failed := len(unanswered) > 0
	for _, g := range groups {
		for _, c := range g {
			failed = failed || !unanswered[c] && c.err != nil
		}
	}
	s.giveBack(recs, failed)
}
