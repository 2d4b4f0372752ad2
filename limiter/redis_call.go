package limiter

import "sync"

// call is one script run's worth of one decision: the sections of a plan
// that share a hash tag (all of them off a cluster). It is what the batcher
// queues, and what a run answers.
type call struct {
	op   string
	now  int64
	p    *plan
	secs []int // indices into p.sections
	// Filled in by the run:
	reply []int64 // this decision's part: admitted, record times, rule answers
	at    int64   // the run's now
	err   error
	done  chan struct{} // one signal when answered (buffered: reused with the work)
}

// redisWork is one decision's scratch space on the Redis store: its plan and,
// off a cluster, its one call. Pooled together, so that a decision allocates
// neither once the pool is warm.
type redisWork struct {
	plan  plan
	call  call
	calls [1]*call
}

var redisWorks = sync.Pool{New: func() any { return new(redisWork) }}

func getRedisWork() *redisWork { return redisWorks.Get().(*redisWork) }

// release returns w to the pool; w must not be used afterwards.
func (w *redisWork) release() {
	if !w.plan.reset() {
		return
	}
	redisWorks.Put(w)
}

// calls splits w's plan into calls: by hash tag on a cluster (see
// callsByTag), else the plan's own call, reused with the work.
func (s *Redis) calls(w *redisWork, op string, now int64) []*call {
	p := &w.plan
	if s.cluster {
		return s.callsByTag(p, op, now)
	}
	c := &w.call
	c.op, c.now, c.p, c.at, c.err = op, now, p, 0, nil
	c.secs, c.reply = c.secs[:0], c.reply[:0]
	for i := range p.sections {
		c.secs = append(c.secs, i)
	}
	if c.done == nil {
		c.done = make(chan struct{}, 1)
	}
	w.calls[0] = c
	return w.calls[:]
}

// wholeCall is a new call carrying every section of p, as a decision off a
// cluster is (a batch's entries each have one).
func wholeCall(p *plan, op string, now int64) *call {
	c := &call{op: op, now: now, p: p, secs: make([]int, len(p.sections)), done: make(chan struct{}, 1)}
	for si := range c.secs {
		c.secs[si] = si
	}
	return c
}
