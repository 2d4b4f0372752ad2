package redisstore

import (
	"context"
	"runtime"
	"time"
)

// This file is the Redis store's batcher, off a cluster: decisions queue as
// calls, and InFlight loops each take what is waiting and decide it
// together, in Go (godecide.go) or in the script (wire.go).

// startBatching starts the batch loops; Close stops them.
func (s *Store) startBatching() {
	s.batches = make(chan *call, 4*s.opts.MaxBatch)
	for i := 0; i < s.opts.InFlight; i++ {
		s.wg.Add(1)
		go func() {
			defer s.wg.Done()
			l := batchLoop{s: s}
			l.run()
		}()
	}
}

// batchLoop is one loop's state between batches.
type batchLoop struct {
	s *Store
	// pending is a call taken from the queue that did not fit the last
	// batch (another op): it starts the next one.
	pending *call
	// held is a batch decided in Go whose write rides with the next round
	// trip. While it is not nil, this loop is counted in s.busy.
	held *decidedInGo
}

// run serves batched calls: it takes one, adds whatever else is already
// waiting with the same op, and decides them together: in Go, or in the
// script when ScriptOnly is set, a lone decision finds the store idle (see
// GoBatchMin), a call is split by hash tag, or a key is hot (see hotKeys).
// A batch decided in Go holds its write until the next round trip, which
// carries it with the next batch's read.
func (l *batchLoop) run() {
	s := l.s
	for {
		batch := l.collect(l.held == nil)
		if batch == nil && l.held == nil {
			return // stopped
		}
		// The store is idle when no loop is counted: no other batch in a
		// round trip, no write waiting anywhere. Taking the count and
		// testing it is one step, so two loops cannot both find it idle.
		idle := false
		if l.held == nil {
			if idle = s.busy.CompareAndSwap(0, 1); !idle {
				s.busy.Add(1)
			}
		}
		lone := idle && batch != nil && len(batch) < s.opts.GoBatchMin && batch[0].op == opDecide
		if batch != nil && (s.opts.ScriptOnly || lone || !wholePlans(batch) || s.hot.touches(batch)) {
			l.held = s.roundTrip(l.held, nil, false)
			ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
			s.runCalls(ctx, batch)
			cancel()
			finish(batch)
		} else {
			l.held = s.roundTrip(l.held, batch, false)
		}
		if l.held == nil {
			s.busy.Add(-1)
		}
	}
}

// collect takes the next batch of calls of one op. Without block it
// returns nil at once when no call waits; with it, it waits for one, and
// returns nil when the store is closed.
func (l *batchLoop) collect(block bool) []*call {
	s := l.s
	first := l.pending
	l.pending = nil
	if first == nil {
		if block {
			select {
			case first = <-s.batches:
			case <-s.stop:
				return nil
			}
		} else {
			select {
			case first = <-s.batches:
			default:
				return nil
			}
		}
	}
	batch := []*call{first}
	// Let goroutines that are ready to run (callers woken by the last
	// run) queue their calls first: with few cores the woken loop would
	// otherwise run before them and carry one call a run. Nothing waits
	// when nothing else is ready.
	runtime.Gosched()
	for len(batch) < s.opts.MaxBatch {
		select {
		case c := <-s.batches:
			if c.op != first.op {
				l.pending = c
				return batch
			}
			batch = append(batch, c)
		default:
			return batch
		}
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
		c.done <- struct{}{}
	}
}

// do runs the calls: through the batcher off a cluster, else one run each,
// in parallel.
func (s *Store) do(ctx context.Context, calls []*call) error {
	if s.batches == nil {
		ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		defer cancel()
		s.each(len(calls), func(i int) { s.runCalls(ctx, calls[i:i+1]) })
		return nil
	}
	// A timer rather than a context: this is every decision's path.
	timer := time.NewTimer(s.opts.Timeout)
	defer timer.Stop()
	for _, c := range calls {
		select {
		case s.batches <- c:
		case <-timer.C:
			return s.timedOut()
		case <-ctx.Done():
			return classify(ctx.Err())
		case <-s.stop:
			return errStoreClosed
		}
	}
	for _, c := range calls {
		select {
		case <-c.done:
		case <-timer.C:
			// The run may still record this decision: an over-count
			// until the record leaves its windows, never an over-admission.
			return s.timedOut()
		case <-ctx.Done():
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
