package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
)

// This file is the lanes of the batcher: one server's queue of decisions
// and the loops that decide them together (batcher.go). Off a cluster the
// store has one lane, on its client. On a cluster it has one lane a master,
// made the first time a decision meets it: a decision whose keys share one
// hash tag (every rule about one recipient) queues on its master's lane,
// so concurrent decisions on one master share one pipelined round trip a
// phase there (a GET a key, then the writes: SET … IFEQ for a component
// of one key where the master has it, one commit_node.lua run for the
// rest), as off a cluster they share one MGET and one commit.lua. A decision over keys of
// several hash tags (a campaign budget beside the recipient's caps) is
// reserved on each tag's master in the script instead (cluster.go).

// lane is one server's batcher.
type lane struct {
	s *Store
	// client sends the lane's round trips: the store's client off a
	// cluster, a master's client on one.
	client pipeliner
	// node is the server's address, for its write path (capability.go).
	node string
	// cluster: the lane is a cluster master's. Its reads are a GET a key
	// (an MGET cannot span slots), its script writes go in one
	// commit_node.lua run (masterwrite.go), its writes are sent once (see
	// once.go), and the decisions that go to the script go there by hash
	// tag.
	cluster bool
	// queue is where the lane's calls wait for a loop.
	queue chan *call
	// loops are the lane's loops; mu guards their keys (loopkeys.go).
	loops []*batchLoop
	mu    sync.Mutex
	// busy counts the lane's loops that have a batch or a held write (from
	// taking a batch to sending its last write): with none, the lane is
	// idle.
	busy atomic.Int32
}

// newLane makes a lane and starts its loops; Close stops them.
func (s *Store) newLane(client pipeliner, node string, cluster bool) *lane {
	l := &lane{s: s, client: client, node: node, cluster: cluster, queue: make(chan *call, 4*s.opts.MaxBatch)}
	n := s.opts.InFlight
	if cluster {
		n = s.opts.MasterInFlight
	}
	for i := 0; i < n; i++ {
		l.loops = append(l.loops, &batchLoop{l: l, wake: make(chan struct{}, 1), keys: map[uint64]int32{}})
	}
	for _, bl := range l.loops {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			bl.run()
		}()
	}
	return l
}

// native reports whether the lane's writes go as SET … IFEQ now. Off a
// cluster the store's first write waits for the node's answer; a master
// is asked in the background, its writes going through commit.lua
// meanwhile.
func (l *lane) native() bool {
	return l.s.caps.native(l.node, askDocs(l.client), !l.cluster)
}

// masterLanes are a cluster store's lanes, by master address.
type masterLanes struct {
	mu     sync.Mutex
	byAddr map[string]*lane
	closed bool
}

// laneFor returns the lane of key's master, or nil when the decision
// cannot be batched there: the client cannot name a key's master (a
// wrapped cluster client), the master is unknown now (the script path
// will say why), or the store is closed.
func (s *Store) laneFor(ctx context.Context, key string) *lane {
	mf, ok := s.masterLanes()
	if !ok {
		return nil
	}
	node, err := mf.MasterForKey(ctx, key)
	if err != nil {
		return nil
	}
	addr := node.Options().Addr
	m := &s.masters
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return nil
	}
	l := m.byAddr[addr]
	if l == nil || l.client != pipeliner(node) {
		// A new master, or one whose client the cluster client made anew
		// (it forgot the node and met it again): the old lane's loops end
		// with the store.
		if m.byAddr == nil {
			m.byAddr = map[string]*lane{}
		}
		l = s.newLane(node, addr, true)
		m.byAddr[addr] = l
	}
	return l
}

// closeLanes stops new lanes from being made (Close).
func (m *masterLanes) closeLanes() {
	m.mu.Lock()
	m.closed = true
	m.mu.Unlock()
}
