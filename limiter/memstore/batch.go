package memstore

import (
	"context"
	"fmt"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// DecideBatch implements Store. The batch is one transaction: the shards of
// every key of every request are locked together, the requests are decided
// in order on the keys as the ones before them left them, and the keys are
// written back once at the end (or, under BatchAll with a denial, never).
// So a batch is as atomic as a single decision, and costs each key one
// decoding and one encoding however many entries it has.
func (m *Store) DecideBatch(ctx context.Context, reqs []limiter.Request, mode limiter.BatchMode) ([]*limiter.Decision, error) {
	if err := limiter.CheckBatch(reqs, mode); err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	clock := m.now()
	w := m.batchWork(len(reqs))
	defer w.release()
	for i := range reqs {
		at := clock
		if !reqs[i].Now.IsZero() {
			at = reqs[i].Now
		}
		if err := w.plans[i].Build("", &reqs[i], at); err != nil {
			return nil, fmt.Errorf("batch entry %d: %w", i, err)
		}
		w.nows[i] = at.UnixMilli()
	}
	written, err := w.decide(mode)
	if err != nil {
		return nil, err
	}
	// The decisions are made from the plans alone: out of the locks.
	ds := make([]*limiter.Decision, len(reqs))
	slab := limiter.NewDecisionSlab(len(reqs))
	for i := range w.plans {
		ds[i] = w.plans[i].FinishFrom(slab, &reqs[i], w.nows[i], w.admitted[i])
	}
	if !written {
		// The keys decoded for this transaction held the admitted
		// entries' records; they were dropped with it, unwritten.
		limiter.ForgetIDs(ds)
	}
	return ds, nil
}

// decide decides w's plans in order under their keys' locks, and writes the
// keys back unless mode drops the batch (then written is false).
func (w *memBatchWork) decide(mode limiter.BatchMode) (written bool, err error) {
	tx := &w.tx
	tx.lock(w.plans)
	defer tx.unlock()
	denied := false
	for i := range w.plans {
		p := &w.plans[i]
		admitted, err := limiter.DecideOn(tx, p, w.nows[i], true)
		if err != nil {
			return false, fmt.Errorf("batch entry %d: %w", i, err)
		}
		if admitted {
			for si, k := range p.KeyLogs {
				if k != nil {
					tx.key(si).touched = true
				}
			}
		}
		w.admitted[i] = admitted
		denied = denied || !admitted
		tx.base += len(p.Sections)
	}
	if mode == limiter.BatchAll && denied {
		return false, nil
	}
	return true, tx.commit()
}
