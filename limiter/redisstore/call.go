package redisstore

import (
	"sync"
	"sync/atomic"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// call is one script run's worth of one decision: the sections of a plan
// that share a hash tag (all of them off a cluster). It is what the batcher
// queues, and what a run answers.
type call struct {
	op   string
	now  int64
	p    *limiter.Plan
	secs []int // indices into p.sections
	// Filled in by the run:
	reply []int64 // this decision's part: admitted, record times, rule answers
	at    int64   // the run's now
	err   error
	done  chan struct{} // one signal when answered (buffered: reused with the work)
	// entry: the call is an entry of a batch send queued on a lane, its
	// batch's other entries right behind it, so it is never a lone
	// decision (see Options.GoBatchMin).
	entry bool
	// state is callQueued until a loop takes the call into a batch it
	// decides (callTaken), or its caller gives up waiting first
	// (callAbandoned): an abandoned call is never decided, so a send
	// answered as failed (503, or let through uncounted) is not counted.
	state atomic.Int32
}

// A call's states (call.state).
const (
	callQueued int32 = iota
	callTaken
	callAbandoned
	// callAnswered: a loop answered it (finish), its reply and err set.
	callAnswered
)

// abandon marks the calls not yet taken as abandoned, for a caller that
// stops waiting: no loop will decide them.
func abandon(calls []*call) {
	for _, c := range calls {
		c.state.CompareAndSwap(callQueued, callAbandoned)
	}
}

// takeLive keeps the calls of batch that are not abandoned, marking them
// taken, in place.
func takeLive(batch []*call) []*call {
	kept := batch[:0]
	for _, c := range batch {
		if c.state.CompareAndSwap(callQueued, callTaken) {
			kept = append(kept, c)
		}
	}
	clear(batch[len(kept):])
	return kept
}

// redisWork is one decision's scratch space on the Redis store: its plan and,
// off a cluster, its one call. Pooled together, so that a decision allocates
// neither once the pool is warm.
type redisWork struct {
	plan  limiter.Plan
	call  call
	calls [1]*call
}

var redisWorks = sync.Pool{New: func() any { return new(redisWork) }}

func getRedisWork() *redisWork { return redisWorks.Get().(*redisWork) }

// release returns w to the pool; w must not be used afterwards.
func (w *redisWork) release() {
	if !w.plan.Reset() {
		return
	}
	redisWorks.Put(w)
}

// calls splits w's plan into calls: by hash tag on a cluster (see
// callsByTag), else the plan's own call, reused with the work.
func (s *Store) calls(w *redisWork, op string, now int64) []*call {
	p := &w.plan
	if s.cluster {
		return s.callsByTag(p, op, now)
	}
	c := &w.call
	c.op, c.now, c.p, c.at, c.err = op, now, p, 0, nil
	c.state.Store(callQueued)
	c.secs, c.reply = sectionIndices(p, c.secs[:0]), c.reply[:0]
	if c.done == nil {
		c.done = make(chan struct{}, 1)
	}
	w.calls[0] = c
	return w.calls[:]
}

// wholeCalls are the calls of a batch's entries off a cluster: one an
// entry, carrying every section of its plan. They come from a few
// allocations for the whole batch instead of four an entry. Their done
// channel is shared, with room for every call's one signal: a batch waits
// for its round trips, never on a call.
type wholeCalls struct {
	calls []call
	secs  []int
	reply []int64
	done  chan struct{}
}

func newWholeCalls(n int) *wholeCalls {
	return &wholeCalls{calls: make([]call, 0, n), done: make(chan struct{}, n)}
}

// add returns the entry's call, with room for its reply. It is called at
// most n times (newWholeCalls), so the calls never move.
func (w *wholeCalls) add(p *limiter.Plan, op string, now int64) *call {
	w.calls = append(w.calls, call{op: op, now: now, p: p, done: w.done})
	c := &w.calls[len(w.calls)-1]
	from := len(w.secs)
	w.secs = sectionIndices(p, w.secs)
	c.secs = w.secs[from:len(w.secs):len(w.secs)]
	need := c.replyLen() - 1 // the run's now is not kept in the reply
	if cap(w.reply)-len(w.reply) < need {
		w.reply = make([]int64, 0, max(need, (cap(w.calls)-len(w.calls)+1)*need))
	}
	c.reply = w.reply[len(w.reply) : len(w.reply) : len(w.reply)+need]
	w.reply = w.reply[:len(w.reply)+need]
	return c
}

// sectionIndices appends the indices of every section of p to dst.
func sectionIndices(p *limiter.Plan, dst []int) []int {
	for si := range p.Sections {
		dst = append(dst, si)
	}
	return dst
}
