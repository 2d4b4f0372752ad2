package lease

import (
	"context"
	"errors"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"
)

// This file gives units back: to a block being spent, or to the store
// from a block's record.

// giveBack closes b and gives its unspent units back to the store.
func (s *Store) giveBack(ctx context.Context, b *block) error {
	b.sec.mu.Lock()
	units := b.close(s.opts.Now())
	b.sec.mu.Unlock()
	_, err := s.refundBlock(ctx, b, units)
	return err
}

// giveUnits gives back units taken from b: to b until its term ends
// (the sweep gives them back with b's unspent units), else to the store,
// when b gave nothing back yet. take is the taking's number for a refund,
// which gives it back once; -1 for units of a request that was not
// admitted.
func (s *Store) giveUnits(ctx context.Context, b *block, units int64, take int64) (bool, error) {
	sec := b.sec
	sec.mu.Lock()
	if take >= 0 {
		if take >= int64(b.takes) || b.refunded[uint32(take)] {
			sec.mu.Unlock()
			return false, nil
		}
		if b.refunded == nil {
			b.refunded = map[uint32]bool{}
		}
		b.refunded[uint32(take)] = true
	}
	if !b.closed {
		// The sweep gives back what b holds when its term ends.
		b.left += units
		sec.mu.Unlock()
		return true, nil
	}
	if b.tombed {
		sec.mu.Unlock()
		return false, nil
	}
	b.tombed = true
	sec.mu.Unlock()
	ok, err := s.refundBlock(ctx, b, units)
	if err != nil {
		sec.mu.Lock()
		b.tombed = false
		if take >= 0 {
			delete(b.refunded, uint32(take))
		}
		sec.mu.Unlock()
	}
	return ok, err
}

// refundBlock gives units of b's record back to the store. The store
// refunds a record once (its time is then a tomb), so a block gives back
// once: at the end of its term, its unspent units and those its sends gave
// back meanwhile. In a bucketed log (limiter.BucketThreshold) a refund of
// a record may carry less than its cost: the units come off the bucket
// that holds it. A log kept as exact records can only give a whole
// unspent block back.
func (s *Store) refundBlock(ctx context.Context, b *block, units int64) (bool, error) {
	r := b.rec
	if units <= 0 || (r.Grain == 0 && units != r.C) {
		return false, nil
	}
	r.C = units
	return s.inner.Refund(ctx, recordlog.EncodeID([]recordlog.Recorded{r}))
}

// Expire gives back the units of every block whose term has ended by
// the clock (Options.Now), and forgets the keys with nothing in hand and
// the blocks past Options.Keep. The sweep calls it every Options.Sweep;
// tests call it themselves.
func (s *Store) Expire(ctx context.Context) error {
	now := s.opts.Now()
	var due []*block
	s.mu.Lock()
	for k, sec := range s.sections {
		sec.mu.Lock()
		spent := sec.spent[:0]
		for _, b := range sec.spent {
			if now.Before(b.deadline) {
				spent = append(spent, b)
			} else {
				due = append(due, b)
			}
		}
		clear(sec.spent[len(spent):])
		sec.spent = spent
		b := sec.cur
		ended := b == nil || b.closed || !now.Before(b.deadline)
		if b != nil && !b.closed && ended {
			due = append(due, b)
			sec.cur = nil
		}
		if ended && len(sec.spent) == 0 && sec.acquiring == nil {
			sec.dead = true
			delete(s.sections, k)
		}
		sec.mu.Unlock()
	}
	for h, b := range s.blocks {
		if now.Sub(b.deadline) > s.opts.Keep {
			delete(s.blocks, h)
		}
	}
	s.mu.Unlock()
	var errs []error
	for _, b := range due {
		errs = append(errs, s.giveBack(ctx, b))
	}
	return errors.Join(errs...)
}

// sweepLoop calls Expire every Options.Sweep until Close.
func (s *Store) sweepLoop() {
	defer close(s.done)
	t := time.NewTicker(s.opts.Sweep)
	defer t.Stop()
	for {
		select {
		case <-s.stop:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), s.opts.GiveBackTimeout)
			s.Expire(ctx)
			cancel()
		}
	}
}
