package redisstore

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// This file is batch sends under BatchEach on a cluster whose masters take
// SET … IFEQ. Without it a cluster decides every entry in freqcap.lua (one
// round trip per master, at five times the Redis CPU of deciding in Go),
// because commit.lua can only write keys of one slot. The native write
// needs no script: each master reads its entries' keys (TIME and GET, one
// pipeline), they are decided in Go, and it writes them with SET … IFEQ
// (a second pipeline): two round trips per master, as off a cluster.
//
// Only entries that are alone on their key go this way: an entry whose
// rules span keys (a campaign budget beside the recipient's caps), and
// every entry sharing a key with one, stays in the script, with the
// reservations of decidebatch.go; so do entries on masters without
// IFEQ (a cluster being upgraded) and on hot keys. Each key's path is
// chosen once for the whole batch, so the two parts share no key, and the
// order of entries within each key is kept.

// masterFinder is a cluster client that names the master of a key, as
// *redis.ClusterClient does.
type masterFinder interface {
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
}

// clusterInGo returns the client when a batch send in mode may be
// decided in Go on this cluster.
func (s *Store) clusterInGo(mode limiter.BatchMode) (masterFinder, bool) {
	if !s.cluster || mode != limiter.BatchEach || s.caps.off != "" {
		return nil, false
	}
	mf, ok := s.client.(masterFinder)
	return mf, ok
}

// decideClusterBatch decides a batch send under BatchEach on a cluster:
// the entries that may be decided in Go (see above) are, master by master,
// the others in the script, all at once. Like decideBatchInGo, it waits at
// most the store's timeout, or until ctx ends; leases keep this store's
// batch sends that share a key taking turns on it.
func (s *Store) decideClusterBatch(ctx context.Context, mf masterFinder, entryCalls [][]*call, groups [][]*call) error {
	byNode, nodes, inGo := s.pickClusterInGo(ctx, mf, entryCalls)
	var scripted [][]*call
	for _, g := range groups {
		var rest []*call
		for _, c := range g {
			if !inGo[c] {
				rest = append(rest, c)
			}
		}
		if len(rest) > 0 {
			scripted = append(scripted, rest)
		}
	}
	if len(byNode) == 0 {
		runCtx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		s.runGroups(runCtx, scripted)
		cancel()
		return nil
	}

	var goCalls []*call
	for _, calls := range byNode {
		goCalls = append(goCalls, calls...)
	}
	return s.underLeases(ctx, goCalls, func() {
		var wg sync.WaitGroup
		if len(scripted) > 0 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				runCtx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
				s.runGroups(runCtx, scripted)
				cancel()
			}()
		}
		for i, calls := range byNode {
			wg.Add(1)
			go func() {
				defer wg.Done()
				s.nodeInGo(nodes[i], calls)
			}()
		}
		wg.Wait()
	})
}

// pickClusterInGo picks the calls decided in Go: those of entries with one
// key, shared with no entry of several keys, not hot, on a master that
// takes native writes. It returns them by master, in entry order.
func (s *Store) pickClusterInGo(ctx context.Context, mf masterFinder, entryCalls [][]*call) (byNode [][]*call, nodes []*redis.Client, inGo map[*call]bool) {
	oneKey := func(calls []*call) string {
		if len(calls) != 1 || len(calls[0].p.Sections) == 0 {
			return ""
		}
		p := calls[0].p
		key := p.Key(&p.Sections[0])
		for si := range p.Sections[1:] {
			if string(p.Key(&p.Sections[si+1])) != string(key) {
				return ""
			}
		}
		return string(key)
	}
	shared := map[string]bool{} // keys an entry of several keys reads
	for _, calls := range entryCalls {
		if oneKey(calls) != "" {
			continue
		}
		for _, c := range calls {
			for _, si := range c.secs {
				shared[string(c.p.Key(&c.p.Sections[si]))] = true
			}
		}
	}
	index := map[*redis.Client]int{}
	native := map[*redis.Client]bool{}
	inGo = map[*call]bool{}
	// Each key's path is chosen once, at its first entry, so that every
	// entry of one key (a recipient sent to twice in one batch) goes the
	// same way, in the body's order: a key that turned hot between two of
	// them would otherwise split them between Go and the script.
	nodeOf := map[string]*redis.Client{} // nil: the script
	for _, calls := range entryCalls {
		key := oneKey(calls)
		if key == "" || shared[key] {
			continue
		}
		node, chosen := nodeOf[key]
		if !chosen {
			node = s.goNode(ctx, mf, key, calls, native)
			nodeOf[key] = node
		}
		if node == nil {
			continue
		}
		i, seen := index[node]
		if !seen {
			i = len(byNode)
			index[node] = i
			byNode, nodes = append(byNode, nil), append(nodes, node)
		}
		byNode[i] = append(byNode[i], calls[0])
		inGo[calls[0]] = true
	}
	return byNode, nodes, inGo
}

// goNode returns the master that decides in Go the entries of key (whose
// first entry is calls), or nil for the script: a hot key, a key whose
// master is unknown, or a master without SET … IFEQ. native remembers
// each master's answer for the batch.
func (s *Store) goNode(ctx context.Context, mf masterFinder, key string, calls []*call, native map[*redis.Client]bool) *redis.Client {
	if s.hot.touches(calls) {
		return nil
	}
	node, err := mf.MasterForKey(ctx, key)
	if err != nil {
		return nil // the script path will say what is wrong
	}
	ok, seen := native[node]
	if !seen {
		// Not waiting: this runs on the caller's time, before its
		// timeout starts. A master met for the first time is asked in
		// the background, its batches in the script meanwhile.
		ok = s.caps.native(node.Options().Addr, askDocs(node), false)
		native[node] = ok
	}
	if !ok {
		return nil
	}
	return node
}

// nodeInGo decides calls (each an entry alone on one key of node) in Go:
// one round trip reads the keys and the node's TIME, one writes them
// natively. The calls a write refused, and those the node did not serve
// (their slot moved), are decided again in the script.
func (s *Store) nodeInGo(node *redis.Client, calls []*call) {
	run := &decidedInGo{calls: calls, b: readBatches.Get().(*readBatch), perComponent: true, writeNative: true, node: node.Options().Addr}
	run.ctx, run.cancel = context.WithTimeout(context.Background(), s.opts.Timeout)
	needTime := false
	for _, c := range calls {
		needTime = needTime || c.now == 0
		run.b.add(c.p.Key(&c.p.Sections[0]))
	}
	var tm *redis.TimeCmd
	gets := make([]*redis.StringCmd, len(run.b.names))
	_, perr := node.Pipelined(run.ctx, func(pipe redis.Pipeliner) error {
		if needTime {
			tm = pipe.Time(run.ctx)
		}
		for i, name := range run.b.names {
			gets[i] = pipe.Get(run.ctx, name)
		}
		return nil
	})
	var now int64
	if tm != nil {
		if err := answered(tm, !tm.Val().IsZero(), perr); err != nil {
			run.fail(err)
			return
		}
		now = tm.Val().UnixMilli()
	}
	var elsewhere []*call // their key's slot is served by another node now
	moved := map[string]bool{}
	for i, g := range gets {
		v, err := g.Result()
		switch {
		case err == nil:
			run.b.keys[i].load(v)
		case err == redis.Nil:
		case notRunHere(err):
			moved[run.b.keys[i].name] = true
		default:
			run.fail(answered(g, false, err))
			return
		}
	}
	if len(moved) > 0 {
		kept := calls[:0:0]
		for _, c := range calls {
			if moved[string(c.p.Key(&c.p.Sections[0]))] {
				elsewhere = append(elsewhere, c)
			} else {
				kept = append(kept, c)
			}
		}
		run.calls = kept
	}
	if len(run.calls) > 0 && s.decideInGo(run, now) {
		// What planNative left for commit.lua (a key to delete) cannot
		// go in one script with other slots' keys: it is decided again
		// in the script, nothing of it having been written.
		elsewhere = append(elsewhere, notNative(run)...)
		_, perr := node.Pipelined(run.ctx, func(pipe redis.Pipeliner) error {
			queueNative(run.ctx, pipe, run, true)
			return nil
		})
		again, redo := s.nativeAnswers(run, perr)
		if len(again) > 0 {
			s.conflicts.Add(1)
		}
		elsewhere = append(append(elsewhere, again...), redo...)
	}
	if len(elsewhere) > 0 {
		s.scriptAgain(run.ctx, elsewhere)
	}
	run.calls = calls
	run.done()
}

// notNative returns the calls of run whose components planNative left for
// commit.lua.
func notNative(run *decidedInGo) []*call {
	if len(run.names) == 0 {
		return nil
	}
	comps := map[int32]bool{}
	for _, c := range run.keyComp {
		comps[c] = true
	}
	var out []*call
	for i, c := range run.calls {
		if comps[run.component[i]] {
			out = append(out, c)
		}
	}
	return out
}

// scriptAgain decides calls again in the script, one run per hash tag, in
// their order.
func (s *Store) scriptAgain(ctx context.Context, calls []*call) {
	for _, c := range calls {
		c.err, c.reply = nil, nil
	}
	var groups [][]*call
	for _, g := range s.byTag(len(calls), func(i int) string { return string(calls[i].p.Key(&calls[i].p.Sections[0])) }) {
		part := make([]*call, len(g))
		for k, i := range g {
			part[k] = calls[i]
		}
		groups = append(groups, part)
	}
	s.runGroups(ctx, groups)
}
