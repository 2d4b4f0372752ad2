package memstore

import (
	"sync"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// memBatchWork is one batch's scratch space on the memory store: a plan for
// each entry and the batch's transaction, pooled together, so that a warm
// batch takes one thing from a pool instead of a plan for each entry, and
// its plans and keys keep their buffers from batch to batch.
type memBatchWork struct {
	plans    []limiter.Plan // [:len(nows)] in use; the rest reset, kept for their buffers
	nows     []int64
	admitted []bool
	tx       batchTxn
}

// maxPooledBatch is the most entries whose scratch space is pooled: a huge
// batch's is better let go.
const maxPooledBatch = 4096

var memBatchWorks = sync.Pool{New: func() any { return new(memBatchWork) }}

// batchWork returns empty scratch space on m for a batch of n entries.
func (m *Store) batchWork(n int) *memBatchWork {
	w := memBatchWorks.Get().(*memBatchWork)
	if cap(w.plans) < n {
		// Keep the plans already there: their buffers are warm.
		w.plans = append(w.plans[:cap(w.plans)], make([]limiter.Plan, n-cap(w.plans))...)
	}
	w.plans = w.plans[:n]
	w.nows, w.admitted = grow(w.nows, n), grow(w.admitted, n)
	w.tx.m = m
	return w
}

// release returns w to the pool; w must not be used afterwards.
func (w *memBatchWork) release() {
	w.tx.reset()
	for i := range w.plans {
		if !w.plans[i].Reset() {
			w.plans[i] = limiter.Plan{}
		}
	}
	if len(w.plans) <= maxPooledBatch {
		memBatchWorks.Put(w)
	}
}
