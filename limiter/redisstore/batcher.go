package redisstore

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// This file is the Redis store's batcher: decisions queue as calls on a
// lane (one server's queue, lane.go), and InFlight loops a lane each take
// what is waiting and decide it together, in Go (godecide.go) or in the
// script (wire.go); no two of a lane's loops have a key in flight at once
// (loopkeys.go).

// batchLoop is one loop's state between batches.
type batchLoop struct {
	l *lane
	// handed are the calls other loops handed over, a key of theirs
	// being in this loop's batches in flight (see claim), in order: they
	// go before the lane's queue. wake tells the loop that one came;
	// nHanded counts them, so that a loop with none takes no lock.
	handed  []*call
	wake    chan struct{}
	nHanded atomic.Int32
	// keys count the hashes of the keys of this loop's calls taken and
	// not yet answered. keys and handed are guarded by the lane's mu
	// (loopkeys.go).
	keys map[uint64]int32
	// taken are the hashes claimed for the batch being decided, and
	// heldTaken those of held, released once their calls are answered.
	taken, heldTaken []uint64
	// pending is a call taken from the queue that did not fit the last
	// batch (another op): it starts the next one.
	pending *call
	// held is a batch decided in Go whose write rides with the next round
	// trip. While it is not nil, this loop is counted in its lane's busy.
	held *decidedInGo
}

// run serves batched calls: it takes one, adds whatever else is already
// waiting with the same op, and decides them together: in Go, or in the
// script when ScriptOnly is set, a lone decision finds the store idle (see
// GoBatchMin) or a call is split by hash tag; when a key is hot (see
// hotKeys), the calls of its component go to the script, the rest to Go.
// A batch decided in Go holds its write until the next round trip, which
// carries it with the next batch's read.
func (bl *batchLoop) run() {
	l, s := bl.l, bl.l.s
	for {
		batch := bl.collect(bl.held == nil)
		if batch == nil && bl.held == nil {
			return // stopped
		}
		if batch != nil {
			// A call handed to the other loop stays queued (its caller
			// may still give up on it); one abandoned is dropped here,
			// its key claims released with the batch's.
			if batch = takeLive(bl.claim(batch)); len(batch) == 0 {
				batch = nil // every call handed to the other loop, or abandoned
				if bl.held == nil {
					// The abandoned calls' keys were claimed: no
					// batch will answer them.
					bl.release(bl.taken)
					bl.taken = bl.taken[:0]
					continue
				}
			}
		}
		// The lane is idle when no loop is counted: no other batch in a
		// round trip, no write waiting anywhere. Taking the count and
		// testing it is one step, so two loops cannot both find it idle.
		idle := false
		if bl.held == nil {
			if idle = l.busy.CompareAndSwap(0, 1); !idle {
				l.busy.Add(1)
			}
		}
		lone := idle && batch != nil && len(batch) < s.opts.GoBatchMin && batch[0].op == opDecide && !batch[0].entry
		var hot []*call
		switch {
		case batch == nil:
		case s.opts.ScriptOnly || lone || !wholePlans(batch):
			hot, batch = batch, nil
		case batch[0].op == opDecideAll:
			// One batch send's entries: all or none, so whole.
			if s.hot.touches(batch) {
				hot, batch = batch, nil
			}
		default:
			// Independent decisions: only those of a hot key's
			// component go to the script.
			hot, batch = s.hot.split(batch)
		}
		// The held write goes first, before the script may read its keys.
		wasHeld := bl.held
		bl.held = l.roundTrip(bl.held, batch, false)
		if wasHeld != nil {
			bl.release(bl.heldTaken) // its write is answered
			bl.heldTaken = bl.heldTaken[:0]
		}
		if hot != nil {
			ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
			l.script(ctx, hot)
			cancel()
			finish(hot)
		}
		// The calls taken are answered unless some wait in held, which
		// keeps every key taken (the hot calls' too) until its write.
		if bl.held == nil {
			bl.release(bl.taken)
			bl.taken = bl.taken[:0]
			l.busy.Add(-1)
		} else {
			bl.taken, bl.heldTaken = bl.heldTaken, bl.taken
		}
	}
}

// script decides calls in freqcap.lua: in one run off a cluster, one run a
// hash tag on a cluster (a run's keys must share a slot), the runs in one
// pipeline, in the calls' order.
func (l *lane) script(ctx context.Context, calls []*call) {
	if l.cluster {
		l.s.scriptAgain(ctx, calls)
		return
	}
	l.s.runCalls(ctx, calls)
}

// collect takes the next batch of calls of one op, those handed over by
// another loop first. Without block it returns nil at once when no call
// waits; with it, it waits for one, and returns nil when the store is
// closed.
func (bl *batchLoop) collect(block bool) []*call {
	s := bl.l.s
	first := bl.pending
	bl.pending = nil
	for first == nil {
		if first = bl.nextHanded(""); first != nil {
			break
		}
		if !block {
			select {
			case first = <-bl.l.queue:
			default:
				return nil
			}
			break
		}
		select {
		case first = <-bl.l.queue:
		case <-bl.wake: // a call handed over: take it
		case <-s.stop:
			return nil
		}
	}
	batch := []*call{first}
	// Let goroutines that are ready to run (callers woken by the last
	// run) queue their calls first: with few cores the woken loop would
	// otherwise run before them and carry one call a run. Nothing waits
	// when nothing else is ready.
	runtime.Gosched()
	for len(batch) < s.opts.MaxBatch {
		c := bl.nextHanded(first.op)
		if c == nil {
			select {
			case c = <-bl.l.queue:
			default:
				return batch
			}
		}
		if c.op != first.op {
			bl.pending = c
			return batch
		}
		batch = append(batch, c)
	}
	return batch
}

// wholePlans reports whether every call carries every section of its plan,
// as deciding in Go needs (a call split by hash tag does not).
func wholePlans(batch []*call) bool {
	for _, c := range batch {
		if len(c.secs) != len(c.p.Sections) {
			return false
		}
	}
	return true
}

// finish hands the calls their answers. done has room for one signal, so
// this never blocks, even when the caller has given up waiting.
func finish(calls []*call) {
	for _, c := range calls {
		c.state.Store(callAnswered)
		c.done <- struct{}{}
	}
}

// do runs the calls: through a lane's batcher when there is one for them
// (off a cluster always; on a cluster a decision of one hash tag goes to
// its master's), else one run each, in parallel.
func (s *Store) do(ctx context.Context, calls []*call) error {
	l := s.main
	if s.cluster && len(calls) == 1 && calls[0].op != opDecideAll {
		c := calls[0]
		l = s.laneFor(ctx, string(c.p.Key(&c.p.Sections[c.secs[0]])))
	}
	if l == nil {
		ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		defer cancel()
		s.each(len(calls), func(i int) { s.runCalls(ctx, calls[i:i+1]) })
		return nil
	}
	return s.queue(ctx, calls, l, nil)
}

// timers are stopped timers for queue.
var timers = sync.Pool{New: func() any {
	t := time.NewTimer(time.Hour)
	t.Stop()
	return t
}}

// queue queues each call in order on its lane (lanes[i], or every one on
// l when lanes is nil), and waits until every call is answered, at most
// the store's timeout or until ctx ends.
func (s *Store) queue(ctx context.Context, calls []*call, l *lane, lanes []*lane) error {
	// A timer rather than a context: this is every decision's path, and
	// a pooled one, reset (since Go 1.23 a stopped timer's channel holds
	// nothing stale).
	timer := timers.Get().(*time.Timer)
	timer.Reset(s.opts.Timeout)
	defer func() {
		timer.Stop()
		timers.Put(timer)
	}()
	for i, c := range calls {
		if lanes != nil {
			l = lanes[i]
		}
		select {
		case l.queue <- c:
		case <-timer.C:
			abandon(calls[:i])
			return s.timedOut()
		case <-ctx.Done():
			abandon(calls[:i])
			return classify(ctx.Err())
		case <-s.stop:
			abandon(calls[:i])
			return errStoreClosed
		}
	}
	for _, c := range calls {
		select {
		case <-c.done:
		case <-timer.C:
			// A call still queued is never decided now. One a loop took
			// may still be recorded: an over-count until the record
			// leaves its windows, never an over-admission.
			abandon(calls)
			return s.timedOut()
		case <-ctx.Done():
			abandon(calls)
			return classify(ctx.Err())
		case <-s.drained:
			select {
			case <-c.done:
			default:
				return errStoreClosed // queued as the store closed
			}
		}
	}
	return nil
}
