package lease

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// Options configure New.
type Options struct {
	// Now is the gateway's clock, by which a block's term is measured.
	// Default time.Now. Decisions on the inner store keep its own clock.
	Now func() time.Time
	// Term is the longest a block is spent for. A rolling rule's term is
	// also at most a hundredth of its window, and a calendar rule's ends
	// with the period. Default 5 minutes: each gateway gives back at most
	// one block a term per key, and each give-back leaves a tomb in the
	// key's value until the record leaves its retention.
	Term time.Duration
	// Sweep is how often the unspent units of blocks whose term has ended
	// are given back. Default 1 second; negative: never by itself (tests
	// call Expire).
	Sweep time.Duration
	// Keep is how long after its term a block's sends may still be
	// refunded; later refunds report false. Default 1 hour.
	Keep time.Duration
	// GiveBackTimeout bounds the give-backs of one sweep and of Close.
	// Default 2 seconds.
	GiveBackTimeout time.Duration
	// KeepInnerOpen makes Close leave the inner store open, for one that
	// others share (caddymodule's pooled Redis store). Default false:
	// Close closes it.
	KeepInnerOpen bool
	// OnGiveBack, when set, is told of each give-back the store failed
	// (err, with the units it left counted, again false) and of each that
	// a later sweep then made (err nil, again true), for the log. It must
	// not block. Default: nothing is told.
	OnGiveBack func(units int64, again bool, err error)
}

// Store wraps an inner store (in practice the Redis store) and serves the
// checks of leased rules (limiter.Rule.Lease) from blocks of their budget
// taken from it; see the package documentation for the algorithm and its
// guarantees. Checks of other rules, and requests with no leased check,
// go to the inner store unchanged.
//
// The zero value is not usable; call New. A Store is safe for concurrent
// use: one acquisition per leased key is in flight at a time, and the
// requests that need it wait for it (bounded by their context). It runs
// one goroutine, the sweep, until Close.
type Store struct {
	inner limiter.Store
	opts  Options

	mu       sync.RWMutex
	sections map[sectionKey]*section
	blocks   map[uint64]*block // by handle, for refunds
	handles  uint64
	closed   bool
	// owing are blocks whose give-back the store failed: each sweep tries
	// again (see retryOwed) until the store takes it or no longer holds
	// the record.
	owing []*block

	// extended holds each leased rolling rule's copy with the longer
	// window its log is decided with (see extend).
	extended sync.Map
	// signatures holds each leased rule's signature (see sectionKey).
	signatures  sync.Map
	cachedRules atomic.Int64

	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

// ErrClosed is returned by a Store used after Close.
var ErrClosed = fmt.Errorf("%w: lease store closed", limiter.ErrStore)

// New returns a store that leases the budgets of leased rules from inner,
// whose admission ids must be record ids (limiter/memstore's and
// limiter/redisstore's are). Close gives back every lease in hand, then
// closes inner (see KeepInnerOpen).
func New(inner limiter.Store, opts Options) *Store {
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Term <= 0 {
		opts.Term = 5 * time.Minute
	}
	if opts.Sweep == 0 {
		opts.Sweep = time.Second
	}
	if opts.Keep <= 0 {
		opts.Keep = time.Hour
	}
	if opts.GiveBackTimeout <= 0 {
		opts.GiveBackTimeout = 2 * time.Second
	}
	s := &Store{inner: inner, opts: opts, sections: map[sectionKey]*section{}, blocks: map[uint64]*block{},
		stop: make(chan struct{}), done: make(chan struct{})}
	if opts.Sweep > 0 {
		go s.sweepLoop()
	} else {
		close(s.done)
	}
	return s
}

// Decide implements limiter.Store: the leased checks take their units from
// the blocks in hand (taking a block when short), the others are decided
// on the inner store, and a denial there puts the units back.
func (s *Store) Decide(ctx context.Context, req *limiter.Request) (*limiter.Decision, error) {
	switch servedAs(req) {
	case unleased:
		return s.inner.Decide(ctx, req)
	case whole:
		return s.decideWhole(ctx, req)
	}
	taken := make([]taking, 0, 1)
	for i := range req.Checks {
		c := &req.Checks[i]
		if c.Rule.Lease <= 0 {
			continue
		}
		tk, err := s.take(ctx, c, req.Now)
		if err != nil {
			s.putBack(taken)
			return nil, err
		}
		if tk.b == nil {
			// The store would not lease the units: decide it whole, for
			// an exact answer (a denial and when to retry, usually).
			s.putBack(taken)
			return s.decideWhole(ctx, req)
		}
		tk.check = i
		taken = append(taken, tk)
	}
	rest := restOf(req, len(taken))
	if len(rest.Checks) == 0 {
		return s.localDecision(req, taken, nil), nil
	}
	d, err := s.inner.Decide(ctx, &rest)
	if err != nil {
		s.putBack(taken)
		return nil, err
	}
	if !d.Allowed {
		s.putBackDenied(taken)
	}
	return s.merge(req, taken, d), nil
}

// decideWhole decides req on the inner store, its leased rolling rules
// counted over their longer windows; the answer names the rules as req
// does.
//
// A leased rule that denies it may be short of units this gateway holds
// unspent (a cost larger than what is left in hand: the store counts the
// block as used): those are given back, and req decided once more, so
// that this gateway never refuses a send for its own lease. Other
// gateways' blocks still count until their terms end (see the package
// doc: under-admission, never over-admission).
func (s *Store) decideWhole(ctx context.Context, req *limiter.Request) (*limiter.Decision, error) {
	ext := s.extendRequest(req)
	d, err := s.inner.Decide(ctx, &ext)
	if err != nil {
		return nil, err
	}
	if !d.Allowed && s.releaseHeld(ctx, req, d) {
		if d, err = s.inner.Decide(ctx, &ext); err != nil {
			return nil, err
		}
	}
	s.answered(req, d)
	return d, nil
}

// releaseHeld gives back to the store the units this gateway holds
// unspent on each leased rule of req that d denies (see release), and
// reports whether any were.
func (s *Store) releaseHeld(ctx context.Context, req *limiter.Request, d *limiter.Decision) bool {
	gave := false
	for i := range req.Checks {
		c := &req.Checks[i]
		if c.Rule.Lease <= 0 || i >= len(d.Results) || !d.Results[i].Denied || d.Results[i].Waived {
			continue
		}
		if s.release(ctx, c) {
			gave = true
		}
	}
	return gave
}

// release gives back to the store the units this gateway's blocks of c's
// key hold unspent, and reports whether any were. The blocks stay open: a
// send that took from one and is put back afterwards (another rule denied
// it, or it was refunded) goes back to its block, to be spent again by
// this gateway within the term, never lost. A block gives back once (the
// store refunds a record once), so what is put back after this is not
// given back at the term's end: it stays counted, towards denying, until
// its record leaves the window.
func (s *Store) release(ctx context.Context, c *limiter.Check) bool {
	sec := s.lookup(c)
	if sec == nil {
		return false
	}
	type held struct {
		b     *block
		units int64
	}
	var hs []held
	hold := func(b *block) {
		if b != nil && !b.closed && !b.tombed && b.left > 0 {
			hs = append(hs, held{b, b.left})
			b.left, b.tombed = 0, true
		}
	}
	sec.mu.Lock()
	for _, b := range sec.spent {
		hold(b)
	}
	hold(sec.cur)
	sec.mu.Unlock()
	gave := false
	for _, h := range hs {
		if ok, err := s.refundBlock(ctx, h.b, h.units); ok && err == nil {
			gave = true
			continue
		}
		// Not given back (a log of exact records gives a block back whole
		// only, or the store failed): still in hand.
		sec.mu.Lock()
		h.b.left += h.units
		h.b.tombed = false
		sec.mu.Unlock()
	}
	return gave
}

// answered names req's rules in d's results (a whole decision ran on
// their extended copies) and notes, for each leased key with a lease
// state, what the store said remains.
func (s *Store) answered(req *limiter.Request, d *limiter.Decision) {
	for i := range d.Results {
		c := &req.Checks[i]
		d.Results[i].Rule = c.Rule
		if c.Rule.Lease > 0 {
			if sec := s.lookup(c); sec != nil {
				sec.mu.Lock()
				sec.hint = d.Results[i].Remaining
				sec.mu.Unlock()
			}
		}
	}
}

// Usage implements limiter.Store: the inner store answers, with leased
// rolling rules counted over their longer windows, as their sends are
// decided (so what it says remains is what the next send gets). Leased
// units not yet spent count as used until they are given back.
func (s *Store) Usage(ctx context.Context, req *limiter.Request) (*limiter.Decision, error) {
	ext := s.extendRequest(req)
	d, err := s.inner.Usage(ctx, &ext)
	if err != nil {
		return nil, err
	}
	for i := range d.Results {
		d.Results[i].Rule = req.Checks[i].Rule
	}
	return d, nil
}

// Reset implements limiter.Store: the inner store forgets, then the
// leases of this gateway on the logs forgotten are dropped (their unspent
// units given back, which the store refuses for records it forgot). A
// leased log keeps the records of its last term: a block taken since may
// be in another gateway's hands, and what that gateway spends from it is
// counted by the block's record alone, so forgetting it would let the
// budget admit that much more than its limit after the reset.
func (s *Store) Reset(ctx context.Context, req *limiter.Request) error {
	var leased, rest []limiter.Check
	for _, c := range req.Checks {
		if c.Rule != nil && c.Rule.Lease > 0 {
			leased = append(leased, c)
		} else {
			rest = append(rest, c)
		}
	}
	var err error
	if len(rest) > 0 {
		r := *req
		r.Checks = rest
		err = s.inner.Reset(ctx, &r)
	}
	if len(leased) > 0 {
		r := *req
		r.Checks, r.Keep = leased, max(r.Keep, s.opts.Term)
		if lerr := s.inner.Reset(ctx, &r); err == nil {
			err = lerr
		}
	}
	var dropped []*block
	s.mu.Lock()
	for k, sec := range s.sections {
		if resets(req, sec) {
			delete(s.sections, k)
			dropped = append(dropped, sec.drop()...)
		}
	}
	s.mu.Unlock()
	s.forgetBlocks(ctx, dropped)
	return err
}

// forgetBlocks gives back the whole of each of this gateway's blocks that
// a reset dropped, their spent units too: the reset forgets those sends,
// and a block of the last term, which the store kept (Request.Keep),
// would still count them.
func (s *Store) forgetBlocks(ctx context.Context, bs []*block) {
	now := s.opts.Now()
	for _, b := range bs {
		b.sec.mu.Lock()
		tombed := b.tombed // a give-back went to the store already
		b.close(now)
		b.tombed = true
		b.sec.mu.Unlock()
		if !tombed {
			s.refundBlock(ctx, b, b.rec.C)
		}
	}
}

// Close implements limiter.Store: it stops the sweep, gives back every
// lease in hand, and closes the inner store unless KeepInnerOpen.
func (s *Store) Close() error {
	var err error
	s.closeOnce.Do(func() {
		close(s.stop)
		<-s.done
		s.mu.Lock()
		s.closed = true
		var held []*block
		for k, sec := range s.sections {
			delete(s.sections, k)
			held = append(held, sec.drop()...)
		}
		owed := s.owing
		s.owing = nil
		s.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), s.opts.GiveBackTimeout)
		s.giveBackAll(ctx, held)
		s.retryOwed(ctx, owed)
		cancel()
		if !s.opts.KeepInnerOpen {
			err = s.inner.Close()
		}
	})
	return err
}

// restOf is req without its leased checks (n of them).
func restOf(req *limiter.Request, n int) limiter.Request {
	rest := *req
	rest.Checks = make([]limiter.Check, 0, len(req.Checks)-n)
	for _, c := range req.Checks {
		if c.Rule.Lease <= 0 {
			rest.Checks = append(rest.Checks, c)
		}
	}
	return rest
}

// merge is the decision of req whose leased checks took their units
// (taken) and whose other checks d decided, in req's order.
func (s *Store) merge(req *limiter.Request, taken []taking, d *limiter.Decision) *limiter.Decision {
	var out *limiter.Decision
	if d.Allowed {
		out = s.localDecision(req, taken, d)
	} else {
		out = &limiter.Decision{Results: make([]limiter.Result, len(req.Checks)), Now: d.Now}
		s.fillLeased(out, taken)
	}
	out.Now, out.Fallback = d.Now, d.Fallback
	j := 0
	for i := range req.Checks {
		if req.Checks[i].Rule.Lease > 0 {
			continue
		}
		out.Results[i] = d.Results[j]
		j++
	}
	finish(out, d.Allowed)
	return out
}

// finish sets the decision's verdict and its denier: the rule that denies
// longest, as the stores choose it.
func finish(d *limiter.Decision, allowed bool) {
	d.Allowed, d.Denier, d.RetryAfter = allowed, -1, 0
	for i := range d.Results {
		r := &d.Results[i]
		if r.Denied && !r.Waived && (d.Denier < 0 || r.RetryAfter > d.RetryAfter) {
			d.Denier, d.RetryAfter = i, r.RetryAfter
		}
	}
}

// giveBackAll gives back the unspent units of blocks; one the store
// fails is owed (see owe). At Close nothing tries again: the units stay
// counted until their record leaves the window, towards denying.
func (s *Store) giveBackAll(ctx context.Context, bs []*block) {
	for _, b := range bs {
		s.giveBack(ctx, b)
	}
}
