package limiter

import (
	"context"
	"fmt"
	"time"
)

// DecideBatch implements Store. The batch is one transaction: the shards of
// every key of every request are locked together, the requests are decided
// in order on the keys as the ones before them left them, and the keys are
// written back once at the end (or, under BatchAll with a denial, never).
// So a batch is as atomic as a single decision, and costs each key one
// decoding and one encoding however many entries it has.
func (m *Memory) DecideBatch(ctx context.Context, reqs []Request, mode BatchMode) ([]*Decision, error) {
	if err := checkBatch(reqs, mode); err != nil {
		return nil, err
	}
	if len(reqs) == 0 {
		return nil, nil
	}
	clock := m.now()
	at := func(req *Request) time.Time {
		if !req.Now.IsZero() {
			return req.Now
		}
		return clock
	}
	plans := make([]*plan, len(reqs))
	defer func() {
		for _, p := range plans {
			if p != nil {
				p.release()
			}
		}
	}()
	for i := range reqs {
		plans[i] = getPlan()
		if err := plans[i].build("", &reqs[i], at(&reqs[i])); err != nil {
			return nil, fmt.Errorf("batch entry %d: %w", i, err)
		}
	}
	w := m.work()
	defer w.release()
	tx := &w.tx
	tx.lock(plans...)
	defer tx.unlock()
	ds := make([]*Decision, len(reqs))
	slab := newDecisionSlab(len(reqs))
	for i, p := range plans {
		now := at(&reqs[i]).UnixMilli()
		admitted, err := decideOn(tx, p, now, true)
		if err != nil {
			return nil, fmt.Errorf("batch entry %d: %w", i, err)
		}
		if admitted {
			for si, k := range p.keyLogs {
				if k != nil {
					tx.find(p.key(&p.sections[si]), tx.hashes[tx.base+si]).touched = true
				}
			}
		}
		ds[i] = p.finishFrom(slab, &reqs[i], now, admitted)
		tx.base += len(p.sections)
	}
	if mode == BatchAll && anyDenied(ds) {
		// The keys decoded for this transaction hold the admitted
		// entries' records; they are dropped with it, unwritten.
		forgetIDs(ds)
		return ds, nil
	}
	if err := tx.commit(); err != nil {
		return nil, err
	}
	return ds, nil
}
