package redisstore

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file is batch sends on a cluster. Without it a cluster decides
// every entry in freqcap.lua (one run a hash tag, one pipeline a master),
// at five times the Redis CPU of deciding in Go. Here each entry whose
// keys share one hash tag queues on its master's lane (lane.go), where it
// is decided in Go with the single sends and the other batch sends that
// wait there: one round trip reads (TIME, a GET a key), the next writes
// (SET … IFEQ for a component of one key where the master has it, one
// commit_node.lua run for the rest) and carries the next batch's read.
//
// An entry whose rules span tags (a campaign budget beside the
// recipient's caps), and every entry sharing a tag with one, stays in the
// script, with the reservations of decidebatch.go. Each tag's path is
// chosen once for the whole batch, so the two parts share no key, and the
// order of entries within each key is kept.

// masterFinder is a cluster client that names the master of a key, as
// *redis.ClusterClient does.
type masterFinder interface {
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
}

// masterLanes returns the client when this cluster store has a lane a
// master: the client names each key's master, and ScriptOnly is off.
func (s *Store) masterLanes() (masterFinder, bool) {
	if !s.cluster || s.opts.ScriptOnly {
		return nil, false
	}
	mf, ok := s.client.(masterFinder)
	return mf, ok
}

// decideInLanes decides a batch send on a cluster: each entry of one hash
// tag (sharing its tag with no entry of several) queues on its master's
// lane, as a single send does, so that concurrent batch sends and single
// sends on one master share its round trips; the other entries are
// decided in the script at the same time. Entries of one key stay in
// order: they queue in order on one lane, and a lane's read follows the
// write before it. A lane decides each entry on its own (OP_DECIDE, as
// under BatchEach): under BatchAll, what the admitted entries recorded is
// refunded when any entry was denied (rollbackEntries), as the script's
// runs on a cluster are. When it fails (a master did not answer in time),
// settled waits until every call is answered or abandoned and returns
// those that were not answered, so that what the masters that answered
// recorded can be given back.
func (s *Store) decideInLanes(ctx context.Context, entryCalls [][]*call, groups [][]*call) (settled func() map[*call]bool, err error) {
	var laneCalls []*call
	var lanes []*lane
	inLane := map[*call]bool{}
	shared := sharedTags(entryCalls)
	laneOf := map[string]*lane{} // by tag: every entry of a tag goes one way
	for _, calls := range entryCalls {
		if len(calls) != 1 {
			continue
		}
		c := calls[0]
		key := string(c.p.Key(&c.p.Sections[c.secs[0]]))
		tag := hashTag(key)
		if shared[tag] {
			continue
		}
		l, seen := laneOf[tag]
		if !seen {
			l = s.laneFor(ctx, key)
			laneOf[tag] = l
		}
		if l == nil {
			continue
		}
		c.op, c.entry = opDecide, true
		laneCalls, lanes = append(laneCalls, c), append(lanes, l)
		inLane[c] = true
	}
	var scripted [][]*call
	for _, g := range groups {
		var rest []*call
		for _, c := range g {
			if !inLane[c] {
				rest = append(rest, c)
			}
		}
		if len(rest) > 0 {
			scripted = append(scripted, rest)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if len(scripted) > 0 {
			runCtx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
			s.runGroups(runCtx, scripted)
			cancel()
		}
	}()
	settled = func() map[*call]bool {
		<-done // the script's runs end within their own timeout
		return settle(laneCalls, 10*s.opts.Timeout+time.Second)
	}
	if err := s.queue(ctx, laneCalls, nil, lanes); err != nil {
		return settled, err
	}
	select {
	case <-done:
		return nil, nil
	case <-ctx.Done():
		return settled, classify(ctx.Err())
	}
}

// settle waits, at most bound, until each call is answered or will never
// be (one still queued is abandoned here: a caller that failed may not
// have queued it, nor abandoned it), and returns those not answered:
// never decided, or (past bound) not known to have recorded anything.
func settle(calls []*call, bound time.Duration) map[*call]bool {
	deadline := time.Now().Add(bound)
	unanswered := map[*call]bool{}
	for _, c := range calls {
		c.state.CompareAndSwap(callQueued, callAbandoned)
		for c.state.Load() == callTaken && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond)
		}
		if c.state.Load() != callAnswered {
			unanswered[c] = true
		}
	}
	return unanswered
}

// sharedTags returns the hash tags that an entry of several tags reads.
func sharedTags(entryCalls [][]*call) map[string]bool {
	shared := map[string]bool{}
	for _, calls := range entryCalls {
		if len(calls) > 1 {
			for _, c := range calls {
				shared[hashTag(string(c.p.Key(&c.p.Sections[c.secs[0]])))] = true
			}
		}
	}
	return shared
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
