package lease

import (
	"fmt"
	"slices"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// This file says which requests a lease serves, and how a leased rule's
// log is counted.

// service is how a request is served.
type service uint8

const (
	// unleased: no leased check; the inner store decides it as it is.
	unleased service = iota
	// leased: the leased checks take units from blocks.
	leased
	// whole: a leased check the blocks cannot serve exactly (see
	// servedAs); the inner store decides the whole request, the leased
	// rules counted over their longer windows.
	whole
)

// servedAs says how req is served. The blocks serve a leased check that
// counts (cost > 0), can deny (neither a shadow nor an exempt request),
// is held to the rule's own limit (a block was taken under that limit) and
// names its log by its values; and only when no other check of the request
// reads the same log (two records of one send in one log).
func servedAs(req *limiter.Request) service {
	s := unleased
	for i := range req.Checks {
		c := &req.Checks[i]
		if c.Rule == nil {
			return unleased // the inner store refuses it
		}
		if c.Rule.Lease <= 0 {
			continue
		}
		if req.Exempt || c.Shadow || c.Cost <= 0 || (c.Limit > 0 && c.Limit < c.Rule.Limit) || c.Sub != "" {
			return whole
		}
		for j := range req.Checks {
			o := &req.Checks[j]
			if j != i && o.Rule != nil && sameLog(c, o) {
				return whole
			}
		}
		s = leased
	}
	return s
}

// sameLog reports whether two checks read one log: the same dimensions,
// values and weight.
func sameLog(a, b *limiter.Check) bool {
	return a.Rule.Weight == b.Rule.Weight && slices.Equal(a.Rule.By, b.Rule.By) && slices.Equal(a.Values, b.Values)
}

// margin is E, how much longer a leased rolling window is counted: a
// hundredth of it, to the millisecond. Every gateway must count a leased
// log with the same margin, so it is fixed by the window alone.
func margin(w time.Duration) time.Duration {
	return (w / 100).Truncate(time.Millisecond)
}

// extend returns the rule a leased log is decided with: for a rolling
// rule, a copy whose window is longer by its margin (made once per rule);
// otherwise r itself. Keys never hold the window, so the copy reads and
// writes the rule's own log.
func (s *Store) extend(r *limiter.Rule) *limiter.Rule {
	if r.Lease <= 0 || r.Window.IsCalendar() {
		return r
	}
	if e, ok := s.extended.Load(r); ok {
		return e.(*limiter.Rule)
	}
	e := *r
	e.Window.Duration += margin(r.Window.Duration)
	got, loaded := s.extended.LoadOrStore(r, &e)
	if !loaded {
		s.cached()
	}
	return got.(*limiter.Rule)
}

// cached counts an entry added to the per-rule caches (extended,
// signatures), and empties them when there are many: each config reload
// brings new rules, and the old ones are never asked for again.
func (s *Store) cached() {
	if s.cachedRules.Add(1) > maxCachedRules {
		s.cachedRules.Store(0)
		s.extended.Clear()
		s.signatures.Clear()
	}
}

// maxCachedRules bounds the per-rule caches: what a few hundred reloads
// of a config with several leased rules fill.
const maxCachedRules = 4096

// signature is the rule's signature (see sectionKey), made once per rule.
func (s *Store) signature(r *limiter.Rule) string {
	if sig, ok := s.signatures.Load(r); ok {
		return sig.(string)
	}
	sig, loaded := s.signatures.LoadOrStore(r, signature(r))
	if !loaded {
		s.cached()
	}
	return sig.(string)
}

// extendRequest is req with its leased rules extended (see extend).
func (s *Store) extendRequest(req *limiter.Request) limiter.Request {
	ext := *req
	ext.Checks = slices.Clone(req.Checks)
	for i := range ext.Checks {
		if r := ext.Checks[i].Rule; r != nil {
			ext.Checks[i].Rule = s.extend(r)
		}
	}
	return ext
}

// termOf is how long a block the store decided at its time at, answering
// res for rule, may be spent: Options.Term, at most the margin of a
// rolling rule and at most what is left of a calendar period. periodEnd
// reports that the term ends with the period, so that nothing is worth
// giving back: the next period counts afresh.
func (s *Store) termOf(rule *limiter.Rule, res *limiter.Result) (term time.Duration, periodEnd bool) {
	if !rule.Window.IsCalendar() {
		return min(s.opts.Term, margin(rule.Window.Duration)), false
	}
	if res.Reset <= s.opts.Term {
		return res.Reset, true
	}
	return s.opts.Term, false
}

// resets reports whether resetting req forgets sec's log: a check over
// the same dimensions and weight, whose values match (all of them, or
// the key's when the check names the log by Sub).
func resets(req *limiter.Request, sec *section) bool {
	for i := range req.Checks {
		c := &req.Checks[i]
		r := c.Rule
		if r == nil || r.Weight != sec.rule.Weight || !slices.Equal(r.By, sec.rule.By) {
			continue
		}
		if c.Sub != "" {
			if len(c.Values) > 0 && len(sec.values) > 0 && c.Values[0] == sec.values[0] {
				return true
			}
			continue
		}
		if slices.Equal(c.Values, sec.values) {
			return true
		}
	}
	return false
}

// CheckRules refuses a rule set a lease cannot serve exactly: each leased
// rule's own fields (limiter.Rule.CheckLease), and a leased rule whose log
// another rule reads (the same dimensions and weight): that rule would
// see the blocks rather than the sends, and record each send again.
func CheckRules(rules []*limiter.Rule) error {
	for i, r := range rules {
		if r.Lease == 0 {
			continue
		}
		if err := r.CheckLease(); err != nil {
			return fmt.Errorf("rule %s: %w", r.Name, err)
		}
		for j, o := range rules {
			if j != i && o.Quiet == nil && o.Weight == r.Weight && slices.Equal(o.By, r.By) {
				return fmt.Errorf("rule %s: a leased rule needs a log of its own, but rule %s counts the same dimensions and cost", r.Name, o.Name)
			}
		}
	}
	return nil
}
