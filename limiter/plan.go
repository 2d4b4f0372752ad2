package limiter

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// A plan is a request turned into what both stores execute: its checks
// grouped by the log they read (one section per key and sub-log), with every
// window in milliseconds. Plans are pooled (each store pools its own with its
// scratch space): building and deciding one allocates nothing once the pool
// is warm.
type plan struct {
	buf      []byte // every section's key and sub-log id, back to back
	sections []section
	rules    []planRule // section i owns rules[r0:r1]
	raw      []rawResult
	checkSec []int      // section of each check
	keyLogs  []*keyLogs // each section's key, once looked up
}

// section is one sub-log of one key and the rules that read it. All rules of
// a section count the same weight, so they share one cost.
type section struct {
	k0, k1, s1 int   // key is buf[k0:k1], sub-log id buf[k1:s1]
	r0, r1     int   // rules[r0:r1]
	retention  int64 // ms, whole seconds: how long records stay
	grain      int64 // ms; 0 keeps every record, else records merge per grain
	cost       int64
	recorded   int64 // when this request was recorded; 0 if it was not
}

func (p *plan) key(s *section) []byte { return p.buf[s.k0:s.k1] }
func (p *plan) sub(s *section) []byte { return p.buf[s.k1:s.s1] }

type planRule struct {
	check  int
	limit  int64    // what the store decides with (see policy.go)
	want   int64    // what the request is held to and answered
	waived bool     // a shadow check or an exempt request: never refuses
	window int64    // ms; 0 for a calendar rule
	bounds [4]int64 // calendar period starts, ms since the epoch
}

// rawResult is one rule's answer from a store, before finish.
type rawResult struct {
	used, reset, retry int64
	ok                 bool
}

var plans = sync.Pool{New: func() any { return new(plan) }}

func getPlan() *plan { return plans.Get().(*plan) }

// release returns p to the pool; p must not be used afterwards.
func (p *plan) release() {
	if p.reset() {
		plans.Put(p)
	}
}

// reset empties p for reuse, keeping its buffers, and reports whether it is
// worth pooling: a huge request's buffers are better let go.
func (p *plan) reset() bool {
	if cap(p.buf) > 64<<10 {
		return false
	}
	p.buf, p.sections, p.rules, p.raw = p.buf[:0], p.sections[:0], p.rules[:0], p.raw[:0]
	p.checkSec = p.checkSec[:0]
	clear(p.keyLogs)
	p.keyLogs = p.keyLogs[:0]
	return true
}

// build groups the checks of req into sections. approx is the caller's idea
// of now, used only to choose candidate calendar periods.
func (p *plan) build(prefix string, req *Request, approx time.Time) error {
	for i := range req.Checks {
		c := &req.Checks[i]
		r := c.Rule
		if r == nil {
			return fmt.Errorf("check %d has no rule", i)
		}
		if len(c.Values) != len(r.By) {
			return fmt.Errorf("rule %s: %d values for %d dimensions", r.Name, len(c.Values), len(r.By))
		}
		if c.Cost < 0 {
			return fmt.Errorf("rule %s: negative cost %d", r.Name, c.Cost)
		}
		var si int
		if j := earlierSameLog(req, i); j >= 0 {
			// Rules over the same dimensions usually come in pairs (15 a
			// minute, 50 a day): no need to build the key again to find
			// that the log is shared.
			si = p.checkSec[j]
		} else {
			si = p.section(prefix, req, i)
		}
		if p.sections[si].cost != c.Cost {
			return fmt.Errorf("rules %s and %s share a log but not a cost", r.Name, req.Checks[p.firstCheck(si)].Rule.Name)
		}
		p.checkSec = append(p.checkSec, si)
	}
	if len(p.sections) > maxSections {
		return fmt.Errorf("a request reads %d logs; at most %d", len(p.sections), maxSections)
	}
	for si := range p.sections {
		s := &p.sections[si]
		s.r0 = len(p.rules)
		var maxLimit int64
		bound := grainLadder[len(grainLadder)-1]
		for i, csi := range p.checkSec {
			if csi != si {
				continue
			}
			c := &req.Checks[i]
			r := c.Rule
			pr := newPlanRule(i, req, c)
			if r.Window.IsCalendar() {
				zone := c.Zone
				if zone == nil {
					zone = r.Window.zone()
				}
				pr.bounds = periodBounds(approx, r.Window.Unit, zone)
			} else {
				pr.window = r.Window.Duration.Milliseconds()
			}
			p.rules = append(p.rules, pr)
			s.retention = max(s.retention, roundUpToSecond(r.Window.retention()))
			maxLimit = max(maxLimit, r.Limit)
			bound = min(bound, grainBound(r))
		}
		s.r1 = len(p.rules)
		s.grain = grainFor(maxLimit, bound)
		if n := maxRecords(maxLimit, s.retention, s.grain); n > maxEntries {
			e := &LogTooLargeError{Records: n, MaxLimit: maxLimit,
				Grain: time.Duration(s.grain) * time.Millisecond, Retention: time.Duration(s.retention) * time.Millisecond}
			for _, pr := range p.rules[s.r0:s.r1] {
				e.Rules = append(e.Rules, req.Checks[pr.check].Rule.Name)
			}
			return e
		}
	}
	return nil
}

// section returns the section of check i of req: an earlier one with the
// same key and sub-log, or a new one with the check's cost.
func (p *plan) section(prefix string, req *Request, i int) int {
	c := &req.Checks[i]
	r := c.Rule
	k0 := len(p.buf)
	if j := earlierSameKey(req, i); j >= 0 {
		s := &p.sections[p.checkSec[j]]
		p.buf = append(p.buf, p.buf[s.k0:s.k1]...) // escaped already
	} else {
		p.buf = appendKey(p.buf, prefix, r.By[0], c.Values[0])
	}
	k1 := len(p.buf)
	if c.Sub != "" {
		p.buf = append(p.buf, c.Sub...)
	} else {
		p.buf = appendSub(p.buf, r, c.Values)
	}
	s1 := len(p.buf)
	for j := range p.sections {
		s := &p.sections[j]
		if bytes.Equal(p.key(s), p.buf[k0:k1]) && bytes.Equal(p.sub(s), p.buf[k1:s1]) {
			p.buf = p.buf[:k0]
			return j
		}
	}
	p.sections = append(p.sections, section{k0: k0, k1: k1, s1: s1, cost: c.Cost})
	return len(p.sections) - 1
}

// earlierSameLog returns an earlier check of req that reads the same log as
// check i for certain (the same dimensions in the same order, the same
// values and the same weight), or -1. Logs shared in other ways (the same
// dimensions listed in another order) are found by comparing the ids built.
func earlierSameLog(req *Request, i int) int {
	c := &req.Checks[i]
	for j := range i {
		o := &req.Checks[j]
		if o.Rule.Weight == c.Rule.Weight && o.Sub == c.Sub && slices.Equal(o.Rule.By, c.Rule.By) && slices.Equal(o.Values, c.Values) {
			return j
		}
	}
	return -1
}

// earlierSameKey returns an earlier check of req whose key is check i's (the
// same first dimension and value), or -1.
func earlierSameKey(req *Request, i int) int {
	c := &req.Checks[i]
	for j := range i {
		o := &req.Checks[j]
		if o.Rule.By[0] == c.Rule.By[0] && o.Values[0] == c.Values[0] {
			return j
		}
	}
	return -1
}

// maxRecords bounds the records a log can hold: twice the largest limit
// (a calendar log keeps the last period and this one), or, bucketed, one a
// bucket over its retention.
func maxRecords(maxLimit, retention, grain int64) int64 {
	n := 2 * maxLimit
	if grain > 0 {
		n = min(n, retention/grain+2)
	}
	return n
}

// LogTooLargeError is CheckLogs' error for rules whose log could hold more
// records than a stored log can (see maxRecords).
type LogTooLargeError struct {
	// Rules share the log (the same dimensions), in the order of the
	// rules.
	Rules []string
	// Records is how many the log could need; MaxLimit the largest limit
	// of its rules (a limit placeholder counts as the most a request may
	// set); Grain the width its records merge into, 0 when every record
	// is kept (no limit over BucketThreshold, or a rolling window under
	// 10 s); Retention how long records are kept.
	Records, MaxLimit int64
	Grain, Retention  time.Duration
}

func (e *LogTooLargeError) Error() string {
	who := "rule " + e.Rules[0]
	if len(e.Rules) > 1 {
		who = "rules " + strings.Join(e.Rules, ", ") + " (one log: the same dimensions)"
	}
	if e.Grain == 0 {
		return fmt.Sprintf("%s: beside a window under 10s every record is kept, and a limit of %d needs up to %d in one log, more than the %d a log holds: lower the limit to %d or less, or make every window 10s or more, whose records merge into buckets of a thousandth of it",
			who, e.MaxLimit, e.Records, maxEntries, maxEntries/2)
	}
	return fmt.Sprintf("%s: a limit over %d (or a limit placeholder) merges records into buckets of %v, the finest the shortest window allows, kept %v: up to %d records in one log, more than the %d a log holds: lengthen the shortest window, or keep every limit of these rules at %d or less (exact records)",
		who, BucketThreshold, e.Grain, e.Retention, e.Records, maxEntries, BucketThreshold)
}

// CheckLogs reports, at configuration time, rules whose shared log could
// hold more records than a stored log can (see maxRecords), with a
// *LogTooLargeError; deciding on them would fail.
func CheckLogs(rules []*Rule) error {
	req := &Request{}
	for _, r := range rules {
		c := Check{Rule: r, Cost: 1, Values: make([]string, len(r.By))}
		for i := range c.Values {
			c.Values[i] = "x"
		}
		req.Checks = append(req.Checks, c)
	}
	p := getPlan()
	defer p.release()
	return p.build("", req, time.Unix(0, 0).UTC())
}

// maxSections bounds the logs one request reads (and, since rules over one
// log share a section, the rules of a section): the Redis script packs
// these counts in a byte.
const maxSections = 255

// keySeen reports whether an earlier section has the same key as section
// si (so that a missing key is not looked up twice).
func (p *plan) keySeen(si int) bool {
	for j := 0; j < si; j++ {
		if bytes.Equal(p.key(&p.sections[j]), p.key(&p.sections[si])) {
			return true
		}
	}
	return false
}

func (p *plan) firstCheck(si int) int {
	for i, csi := range p.checkSec {
		if csi == si {
			return i
		}
	}
	return 0
}

func roundUpToSecond(d time.Duration) int64 {
	return (d.Milliseconds() + 999) / 1000 * 1000
}
