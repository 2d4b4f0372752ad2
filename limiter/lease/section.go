package lease

import (
	"context"
	"encoding/binary"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"
)

// This file is a leased key's state: the block being spent, taking units
// from it, and taking a new one from the store.

// sectionKey names the lease state of one leased log as one rule reads it:
// what the rule counts and how (a reload that leaves the rule as it was
// keeps its blocks; one that changes it starts afresh), the values and,
// for a calendar rule, the zone its periods are in.
type sectionKey struct {
	rule   string // see signature
	values string // each value after its length
	zone   string
}

// signature is what a block taken for r depends on: its dimensions and
// weight (the log), limit, window and block size.
func signature(r *limiter.Rule) string {
	return fmt.Sprintf("%q %q %d %d %d %v %d", r.By, r.Weight, r.Limit, r.Window.Duration, r.Window.Unit, r.Window.Zone, r.Lease)
}

// section is the lease state of one key. Every field, and the fields of
// its blocks, are guarded by mu.
type section struct {
	rule   *limiter.Rule
	values []string
	mu     sync.Mutex
	cur    *block // the block being spent, or nil
	// spent are earlier blocks still in their term: what their sends give
	// back by Refund waits in them for the term's end.
	spent []*block
	// acquiring is closed when the acquisition in flight ends; nil when
	// none is.
	acquiring chan struct{}
	// gen counts the acquisitions ended; denied is gen after the last one
	// the store denied: a request that waited for it is decided whole.
	gen, denied uint64
	// failedGen is gen after the last acquisition the store failed, and
	// failed its error: the requests that waited for it fail with it,
	// rather than each try again in turn (behind a master that does not
	// answer, each waited a timeout more than the one before: seconds).
	failedGen uint64
	failed    error
	// hint is what the store last said remains, the most the next block
	// asks for; -1 before any answer.
	hint int64
	// dead: dropped by Reset, Close or the sweep; a request that finds it
	// so looks the key up again.
	dead bool
}

// block is units of a budget recorded in the store for this gateway.
type block struct {
	handle uint64
	sec    *section
	rec    recordlog.Recorded // what the store recorded: key, log, grain, time, units
	left   int64              // units not taken
	takes  uint32             // units taken, in takes: each take's number
	// refunded are the takes given back by Refund.
	refunded map[uint32]bool
	// start is the gateway's clock just before the store decided the
	// block, deadline when its term ends.
	start, deadline time.Time
	at              time.Time      // the store's time of the decision
	answer          limiter.Result // the store's answer for the rule
	// periodEnd: the term ends with the calendar period; what is left
	// then is not worth giving back.
	periodEnd bool
	closed    bool // the term ended, or it was dropped: units go to the store
	// tombed: a give-back was sent to the store. The store refunds a
	// record once, so later refunds of its sends report false.
	tombed bool
	// owed are units of a closed block whose give-back the store failed,
	// not tombed: the sweep, or the next of its sends given back, sends
	// them again.
	owed int64
}

// taking is units a leased check took from a block.
type taking struct {
	b     *block
	take  uint32
	units int64
	check int            // the check's index in its request
	res   limiter.Result // the check's answer
	at    time.Time      // the store's time, as the gateway reckons it
}

// section returns the lease state of c's key, made on first use.
func (s *Store) section(c *limiter.Check) (*section, error) {
	k := s.keyOf(c)
	s.mu.RLock()
	sec, closed := s.sections[k], s.closed
	s.mu.RUnlock()
	if closed {
		return nil, ErrClosed
	}
	if sec != nil {
		return sec, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, ErrClosed
	}
	if sec = s.sections[k]; sec == nil {
		sec = &section{rule: c.Rule, values: append([]string(nil), c.Values...), hint: -1}
		s.sections[k] = sec
	}
	return sec, nil
}

// lookup returns the lease state of c's key, or nil.
func (s *Store) lookup(c *limiter.Check) *section {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.sections[s.keyOf(c)]
}

func (s *Store) keyOf(c *limiter.Check) sectionKey {
	var b []byte
	for _, v := range c.Values {
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	k := sectionKey{rule: s.signature(c.Rule), values: string(b)}
	if c.Rule.Window.IsCalendar() && c.Zone != nil {
		k.zone = c.Zone.String()
	}
	return k
}

// take takes c.Cost units for c from its key's block, taking a new block
// from the store when the one in hand is short. A taking without a block
// means the store would not lease them: the request is to be decided
// whole.
func (s *Store) take(ctx context.Context, c *limiter.Check, reqNow time.Time) (taking, error) {
	for {
		sec, err := s.section(c)
		if err != nil {
			return taking{}, err
		}
		tk, again, err := s.takeFrom(ctx, sec, c, reqNow)
		if !again {
			return tk, err
		}
	}
}

// takeFrom is take on one key's state; again reports that it was dropped
// meanwhile, so the key is to be looked up again.
func (s *Store) takeFrom(ctx context.Context, sec *section, c *limiter.Check, reqNow time.Time) (tk taking, again bool, err error) {
	sec.mu.Lock()
	var waitedFor error // the failure of the acquisition this request waited for
	for {
		if sec.dead {
			sec.mu.Unlock()
			return taking{}, true, nil
		}
		now := s.opts.Now()
		if b := sec.usableBlock(now, c.Cost); b != nil {
			tk = b.takeUnits(now, c)
			sec.mu.Unlock()
			return tk, false, nil
		}
		if waitedFor != nil {
			sec.mu.Unlock()
			return taking{}, false, waitedFor
		}
		ch := sec.acquiring
		if ch == nil {
			break
		}
		gen := sec.gen
		sec.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return taking{}, false, fmt.Errorf("%w: waiting for a lease of rule %s: %v", limiter.ErrTimeout, c.Rule.Name, ctx.Err())
		}
		sec.mu.Lock()
		if sec.denied > gen {
			sec.mu.Unlock()
			return taking{}, false, nil
		}
		if sec.failedGen == gen+1 {
			// The store failed the acquisition it waited for: unless
			// a block is in hand by now, it fails with it.
			waitedFor = sec.failed
		}
	}

	if sec.hint >= 0 && sec.hint < c.Cost {
		// The store said too little remains: decide the request whole,
		// whose answer says again what remains.
		sec.mu.Unlock()
		return taking{}, false, nil
	}
	// This request takes the next block; the others wait for it.
	ch := make(chan struct{})
	sec.acquiring = ch
	size := c.Rule.Lease
	if sec.hint >= 0 {
		size = min(size, sec.hint)
	}
	size = max(size, c.Cost)
	if old := sec.cur; old != nil && !old.closed {
		// Less than the cost is left in it: it gives back at the end of
		// its term, with what its sends give back meanwhile.
		sec.spent = append(sec.spent, old)
	}
	sec.cur = nil
	sec.mu.Unlock()
	b, res, err := s.acquire(ctx, sec, c, size, reqNow)

	sec.mu.Lock()
	sec.acquiring = nil
	sec.gen++
	close(ch)
	switch {
	case err != nil:
		if ctx.Err() == nil {
			// The store failed, not this request's patience: the
			// others would meet the same store.
			sec.failedGen, sec.failed = sec.gen, err
		}
		sec.mu.Unlock()
		return taking{}, false, err
	case b == nil:
		sec.hint, sec.denied = res.Remaining, sec.gen
		sec.mu.Unlock()
		return taking{}, false, nil
	}
	sec.hint = res.Remaining
	now := s.opts.Now()
	if sec.dead || !b.usable(now, c.Cost) {
		// Dropped meanwhile, or a block with no term (recorded past its
		// period's end): give it back whole.
		dead := sec.dead
		units := b.close(now)
		sec.mu.Unlock()
		s.refundBlock(ctx, b, units)
		return taking{}, dead, nil
	}
	sec.cur = b
	tk = b.takeUnits(now, c)
	sec.mu.Unlock()
	return tk, false, nil
}

// acquire decides a block of size units for c's key on the inner store:
// the leased check alone, on the rule's extended window. When the store
// denies it but has at least c.Cost left, it asks once more for what is
// left. A nil block with no error is the store's denial, res its answer.
func (s *Store) acquire(ctx context.Context, sec *section, c *limiter.Check, size int64, reqNow time.Time) (*block, limiter.Result, error) {
	rule := c.Rule
	for retried := false; ; retried = true {
		req := limiter.Request{Now: reqNow, Checks: []limiter.Check{{Rule: s.extend(rule), Values: c.Values, Cost: size, Zone: c.Zone}}}
		start := s.opts.Now()
		d, err := s.inner.Decide(ctx, &req)
		if err != nil {
			return nil, limiter.Result{}, err
		}
		res := d.Results[0]
		res.Rule = rule
		if !d.Allowed {
			if !retried && res.Remaining >= c.Cost && res.Remaining < size {
				size = res.Remaining
				continue
			}
			return nil, res, nil
		}
		recs, err := recordlog.DecodeID(d.ID())
		if err != nil || len(recs) != 1 || recs[0].C != size {
			s.inner.Refund(ctx, d.ID())
			return nil, res, fmt.Errorf("%w: lease of rule %s: the inner store's admission id is not one record of the block", limiter.ErrStore, rule.Name)
		}
		term, periodEnd := s.termOf(rule, &res)
		if rule.Window.IsCalendar() && recs[0].T >= d.Now.Add(res.Reset).UnixMilli() {
			// Moved past the newest record into the next period: it counts
			// there, so it may not be spent in this one.
			term, periodEnd = 0, false
		}
		b := &block{sec: sec, rec: recs[0], left: size, start: start, deadline: start.Add(term), at: d.Now, answer: res, periodEnd: periodEnd}
		s.mu.Lock()
		s.handles++
		b.handle = s.handles
		s.blocks[b.handle] = b
		s.mu.Unlock()
		return b, res, nil
	}
}

// usableBlock returns the block in hand that may give cost units at now:
// one set aside within its term that sends given back refilled, first (a
// refund after a release, which tombed the block: it cannot give them
// back to the store, so they are spent here before its term ends or stay
// counted; a probe lost 1,818 units of a 5,000 day that way), else the
// current one. nil when none may; under sec.mu.
func (sec *section) usableBlock(now time.Time, cost int64) *block {
	for _, b := range sec.spent {
		if b.usable(now, cost) {
			return b
		}
	}
	if sec.cur.usable(now, cost) {
		return sec.cur
	}
	return nil
}

// usable reports whether b may give cost units at now.
func (b *block) usable(now time.Time, cost int64) bool {
	return b != nil && !b.closed && now.Before(b.deadline) && b.left >= cost
}

// takeUnits takes c's cost from b at now; under sec.mu.
func (b *block) takeUnits(now time.Time, c *limiter.Check) taking {
	b.left -= c.Cost
	tk := taking{b: b, take: b.takes, units: c.Cost, res: b.sec.result(now, c.Rule, b), at: b.at.Add(now.Sub(b.start))}
	b.takes++
	return tk
}

// result is rule's answer at now: the store's answer for the newest block
// in hand (b, or one taken after it), less what every block in hand still
// holds unspent, which that answer counted; Reset counted down on the
// gateway's clock. Other gateways' sends since are not seen. An answer of
// an older block would go back in time: spending a block set aside told
// 1,000 used after 1,800. Under sec.mu.
func (sec *section) result(now time.Time, rule *limiter.Rule, b *block) limiter.Result {
	newest, held := b, int64(0)
	inHand := func(x *block) {
		if x == nil || x.closed {
			return
		}
		held += x.left
		if x.handle > newest.handle { // taken later
			newest = x
		}
	}
	for _, x := range sec.spent {
		inHand(x)
	}
	inHand(sec.cur)
	if b != sec.cur && !slices.Contains(sec.spent, b) {
		inHand(b) // not in hand yet: the block being taken
	}
	used := newest.answer.Used - held
	return limiter.Result{Rule: rule, Limit: newest.answer.Limit, Used: used, Remaining: max(0, newest.answer.Limit-used),
		Reset: max(0, newest.answer.Reset-now.Sub(newest.start))}
}

// close ends b's spending at now and returns the units to give back to
// the store: none when its term ended with its period.
func (b *block) close(now time.Time) (units int64) {
	if b.closed {
		return 0
	}
	b.closed = true
	units, b.left = b.left, 0
	if (b.periodEnd && !now.Before(b.deadline)) || b.tombed {
		units = 0 // not worth giving back, or given back already (release)
	}
	b.tombed = b.tombed || units > 0
	return units
}

// drop marks sec dead and returns its blocks that may hold units to give
// back (see giveBack).
func (sec *section) drop() []*block {
	sec.mu.Lock()
	defer sec.mu.Unlock()
	sec.dead = true
	bs := sec.spent
	if sec.cur != nil {
		bs = append(bs, sec.cur)
	}
	sec.cur, sec.spent = nil, nil
	return bs
}

// putBack returns units taken by a request that was not admitted: to
// their block while it is spent, else to the store.
func (s *Store) putBack(taken []taking) {
	for _, tk := range taken {
		s.giveUnits(context.Background(), tk.b, tk.units, -1)
	}
}

// putBackDenied puts back the units of a request another rule denied,
// and answers its leased checks as any store answers a rule of a denied
// request: what it counts without the send.
func (s *Store) putBackDenied(taken []taking) {
	s.putBack(taken)
	for i := range taken {
		res := &taken[i].res
		res.Used = max(0, res.Used-taken[i].units)
		res.Remaining = max(0, res.Limit-res.Used)
	}
}
