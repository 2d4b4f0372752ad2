package redisstore

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// This file is batch sends on a cluster decided in Go. Without it a
// cluster decides every entry in freqcap.lua (one round trip per master,
// at five times the Redis CPU of deciding in Go), because commit.lua can
// only write keys of one slot. Here each master reads its entries' keys
// (TIME and a GET a key, one pipeline), they are decided in Go, and it
// writes them by component (a second pipeline): SET … IFEQ for a
// component of one key on a master that has it, one commit.lua run a
// component otherwise (a component's keys share a hash tag, see
// slotwrite.go). Two round trips per master, as off a cluster.
//
// Only entries whose keys share one hash tag go this way: an entry whose
// rules span tags (a campaign budget beside the recipient's caps), and
// every entry sharing a tag with one, stays in the script, with the
// reservations of decidebatch.go; so do the entries of hot keys. Each
// tag's path is chosen once for the whole batch, so the two parts share no
// key, and the order of entries within each key is kept.
//
// Under BatchAll every master is read and decided before any writes: when
// any entry is denied, nothing decided in Go is written. A component whose
// write finds a key changed is decided again in the script; when that
// denies, what the others wrote is refunded by rollbackEntries, as for the
// script's runs (reserve and roll back, as for one decision across
// shards).

// masterFinder is a cluster client that names the master of a key, as
// *redis.ClusterClient does.
type masterFinder interface {
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
}

// clusterInGo returns the client when batch sends may be decided in Go on
// this cluster.
func (s *Store) clusterInGo() (masterFinder, bool) {
	if !s.cluster || s.opts.ScriptOnly {
		return nil, false
	}
	mf, ok := s.client.(masterFinder)
	return mf, ok
}

// decideClusterBatch decides a batch send on a cluster: the entries that
// may be decided in Go (see above) are, master by master, the others in
// the script, all at once. Like decideBatchInGo, it waits at most the
// store's timeout, or until ctx ends; leases keep this store's batch sends
// that share a key taking turns on it.
func (s *Store) decideClusterBatch(ctx context.Context, mf masterFinder, entryCalls [][]*call, groups [][]*call, all bool) error {
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
		runs := make([]*decidedInGo, len(byNode))
		s.each(len(byNode), func(i int) { runs[i] = s.nodeRead(nodes[i], byNode[i]) })
		if all && !allAdmitted(goCalls) {
			// Nothing decided in Go is written: the batch is denied.
			for _, run := range runs {
				if run != nil {
					run.done()
				}
			}
			for _, c := range goCalls {
				c.wrote = -1
			}
		} else {
			s.each(len(runs), func(i int) {
				if runs[i] != nil {
					s.nodeWrite(nodes[i], runs[i])
				}
			})
		}
		wg.Wait()
	})
}

// pickClusterInGo picks the calls decided in Go: those of entries of one
// hash tag, sharing no tag with an entry of several, not hot. It returns
// them by master, in entry order.
func (s *Store) pickClusterInGo(ctx context.Context, mf masterFinder, entryCalls [][]*call) (byNode [][]*call, nodes []*redis.Client, inGo map[*call]bool) {
	tagOf := func(c *call) string { return hashTag(string(c.p.Key(&c.p.Sections[c.secs[0]]))) }
	shared := map[string]bool{} // tags an entry of several tags reads
	for _, calls := range entryCalls {
		if len(calls) > 1 {
			for _, c := range calls {
				shared[tagOf(c)] = true
			}
		}
	}
	index := map[*redis.Client]int{}
	inGo = map[*call]bool{}
	// Each tag's path is chosen once, at its first entry, so that every
	// entry of one tag (a recipient sent to twice in one batch) goes the
	// same way, in the body's order: a key that turned hot between two of
	// them would otherwise split them between Go and the script.
	nodeOf := map[string]*redis.Client{} // nil: the script
	for _, calls := range entryCalls {
		if len(calls) != 1 {
			continue
		}
		c := calls[0]
		tag := tagOf(c)
		if shared[tag] {
			continue
		}
		node, chosen := nodeOf[tag]
		if !chosen {
			node = s.goNode(ctx, mf, c)
			nodeOf[tag] = node
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
		byNode[i] = append(byNode[i], c)
		inGo[c] = true
	}
	return byNode, nodes, inGo
}

// goNode returns the master that decides in Go the entries of c's hash
// tag (c is its first entry), or nil for the script: a hot key, or a
// master that is unknown now.
func (s *Store) goNode(ctx context.Context, mf masterFinder, c *call) *redis.Client {
	if s.hot.touches([]*call{c}) {
		return nil
	}
	node, err := mf.MasterForKey(ctx, string(c.p.Key(&c.p.Sections[c.secs[0]])))
	if err != nil {
		return nil // the script path will say what is wrong
	}
	return node
}

// nodeRead reads the keys of calls (entries of one hash tag each, on
// node) and the node's TIME in one round trip, and decides them in Go. It
// returns the run when it has something to write, else nil with every
// call answered. The calls whose key's slot the node no longer serves
// are decided in the script instead.
func (s *Store) nodeRead(node *redis.Client, calls []*call) *decidedInGo {
	addr := node.Options().Addr
	l := &lane{s: s, client: node, node: addr, cluster: true}
	run := &decidedInGo{calls: calls, b: readBatches.Get().(*readBatch), perComponent: true, cluster: true, node: addr}
	run.writeNative = calls[0].op != opPeek && l.native()
	run.ctx, run.cancel = context.WithTimeout(context.Background(), s.opts.Timeout)
	needTime := false
	for _, c := range calls {
		needTime = needTime || c.now == 0
		for si := range c.p.Sections {
			run.b.add(c.p.Key(&c.p.Sections[si]))
		}
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
	now, err := l.decodeGets(run, tm, gets, perr)
	if err != nil {
		run.fail(err)
		return nil
	}
	if len(run.calls) == 0 || !s.decideInGo(run, now) {
		for _, c := range run.calls {
			c.wrote = -1
		}
		run.done()
		return nil
	}
	return run
}

// nodeWrite sends run's writes to node in one round trip and answers its
// calls: the components a write refused (a key changed) or the node did
// not run (its slot moved) are decided again in the script.
func (s *Store) nodeWrite(node *redis.Client, run *decidedInGo) {
	for _, c := range run.calls {
		c.wrote = 1
	}
	var ec *redis.Cmd
	_, perr := node.Pipelined(run.ctx, func(pipe redis.Pipeliner) error {
		ec = queueCommit(run.ctx, pipe, run)
		queueNative(run.ctx, pipe, run, true)
		return nil
	})
	s.finishWrite(run, ec, perr)
}

// scriptAgain decides calls again in the script, one run per hash tag, in
// their order.
func (s *Store) scriptAgain(ctx context.Context, calls []*call) {
	for _, c := range calls {
		c.err, c.reply, c.wrote = nil, nil, 0
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
