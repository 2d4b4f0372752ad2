package lease

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"
)

// This file gives units back: to a block being spent, or to the store
// from a block's record.

// giveBack closes b and gives its unspent units back to the store; when
// the store fails, b owes them (see owe).
func (s *Store) giveBack(ctx context.Context, b *block) error {
	b.sec.mu.Lock()
	units := b.close(s.opts.Now())
	b.sec.mu.Unlock()
	_, err := s.refundBlock(ctx, b, units)
	if err != nil {
		s.owe(b, units, err)
	}
	return err
}

// owe notes that the store failed to take units given back from b, which
// is closed: b is untombed with the units owed, and each sweep sends them
// again (retryOwed). Without it a Redis down at the end of a term, or
// failing at a reload, left a gateway's unspent block counted until its
// record left the window: a whole day's budget, under a calendar day.
func (s *Store) owe(b *block, units int64, err error) {
	b.sec.mu.Lock()
	b.tombed = false
	b.owed += units
	b.sec.mu.Unlock()
	s.stillOwing(b)
	if s.opts.OnGiveBack != nil {
		s.opts.OnGiveBack(units, false, err)
	}
}

// stillOwing puts b on the owing list for the next sweep, once.
func (s *Store) stillOwing(b *block) {
	s.mu.Lock()
	if !slices.Contains(s.owing, b) {
		s.owing = append(s.owing, b)
	}
	s.mu.Unlock()
}

// retryOwed sends again what the blocks of owing owe. A block the store
// still fails stays owing (on s.owing) for the next sweep; one it takes,
// or that owes nothing any more (a send of it given back carried its
// units), is done.
func (s *Store) retryOwed(ctx context.Context, owing []*block) {
	for _, b := range owing {
		b.sec.mu.Lock()
		units := b.owed
		if b.tombed || units == 0 {
			b.sec.mu.Unlock()
			continue
		}
		b.owed, b.tombed = 0, true
		b.sec.mu.Unlock()
		ok, err := s.refundBlock(ctx, b, units)
		if err != nil {
			b.sec.mu.Lock()
			b.tombed = false
			b.owed += units
			b.sec.mu.Unlock()
			s.stillOwing(b)
			continue
		}
		if ok && s.opts.OnGiveBack != nil {
			s.opts.OnGiveBack(units, true, nil)
		}
	}
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
	// What b owes from a failed give-back goes with these units: the
	// store refunds its record once.
	owed := b.owed
	b.owed, b.tombed = 0, true
	sec.mu.Unlock()
	ok, err := s.refundBlock(ctx, b, units+owed)
	if err != nil {
		sec.mu.Lock()
		b.tombed = false
		b.owed += owed
		if take >= 0 {
			delete(b.refunded, uint32(take))
		}
		sec.mu.Unlock()
		if owed > 0 {
			// A sweep meanwhile found b tombed and let it go: it owes
			// again.
			s.stillOwing(b)
		}
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
// the clock (Options.Now), sends again what earlier give-backs the store
// failed still owe, and forgets the keys with nothing in hand and
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
	owing := s.owing
	s.owing = nil
	s.mu.Unlock()
	var errs []error
	for _, b := range due {
		errs = append(errs, s.giveBack(ctx, b))
	}
	s.retryOwed(ctx, owing)
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
