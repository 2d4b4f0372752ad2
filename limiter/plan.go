package limiter

import (
	"bytes"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"
)

// A Plan is a request turned into what every store executes: its checks
// grouped by the log they read (one section per key and sub-log), with every
// window in milliseconds. Stores build one (Build), decide it over their
// keys (DecideOn, or freqcap.lua on Redis, from the same sections and
// rules) and turn its answers into a Decision (Finish); callers of a store
// never see one. Plans are pooled (each store pools its own with its
// scratch space): building and deciding one allocates nothing once the pool
// is warm.
type Plan struct {
	buf      []byte // every section's key and sub-log id, back to back
	Sections []Section
	Rules    []planRule // section i owns Rules[R0:R1]
	Raw      []recordlog.RawResult
	checkSec []int                // section of each check
	KeyLogs  []*recordlog.KeyLogs // each section's key, once looked up
	// Exempt is the request's: every record it makes is marked exempt
	// (recordlog's exempt marks), in the log of each section.
	Exempt bool
}

// Section is one sub-log of one key and the rules that read it. All rules of
// a section count the same weight, so they share one cost.
type Section struct {
	k0, k1, s1 int   // key is buf[k0:k1], sub-log id buf[k1:s1]
	e0, e1     int   // an exempt plan's: the id of the log's exempt marks is buf[e0:e1]
	R0, R1     int   // Plan.Rules[R0:R1]
	Retention  int64 // ms, whole seconds: how long records stay
	Grain      int64 // ms; 0 keeps every record, else records merge per grain
	Cost       int64
	Recorded   int64 // when this request was recorded; 0 if it was not
}

// Key is the key that s reads.
func (p *Plan) Key(s *Section) []byte { return p.buf[s.k0:s.k1] }

// Sub is the id of the sub-log that s reads in its key.
func (p *Plan) Sub(s *Section) []byte { return p.buf[s.k1:s.s1] }

// ExemptID is the id of the exempt marks of s's sub-log, in an exempt
// plan (recordlog.AppendExemptID).
func (p *Plan) ExemptID(s *Section) []byte { return p.buf[s.e0:s.e1] }

type planRule struct {
	check             int
	want              int64 // what the request is held to and answered
	waived            bool  // a shadow check or an exempt request: never refuses
	recordlog.LogRule       // what the store decides with (see policy.go)
}

var plans = sync.Pool{New: func() any { return new(Plan) }}

// GetPlan returns an empty plan from the pool; Release gives it back.
func GetPlan() *Plan { return plans.Get().(*Plan) }

// AddLog appends a section that names the log sub of key and reads it
// with no rule: what a refund reads and writes.
func (p *Plan) AddLog(key, sub string) {
	k0 := len(p.buf)
	p.buf = append(p.buf, key...)
	k1 := len(p.buf)
	p.buf = append(p.buf, sub...)
	p.Sections = append(p.Sections, Section{k0: k0, k1: k1, s1: len(p.buf)})
}

// Release returns p to the pool; p must not be used afterwards.
func (p *Plan) Release() {
	if p.Reset() {
		plans.Put(p)
	}
}

// Reset empties p for reuse, keeping its buffers, and reports whether it is
// worth pooling: a huge request's buffers are better let go.
func (p *Plan) Reset() bool {
	if cap(p.buf) > 64<<10 {
		return false
	}
	p.buf, p.Sections, p.Rules, p.Raw = p.buf[:0], p.Sections[:0], p.Rules[:0], p.Raw[:0]
	p.checkSec, p.Exempt = p.checkSec[:0], false
	clear(p.KeyLogs)
	p.KeyLogs = p.KeyLogs[:0]
	return true
}

// Build groups the checks of req into sections. approx is the caller's idea
// of now, used only to choose candidate calendar periods.
func (p *Plan) Build(prefix string, req *Request, approx time.Time) error {
	for i := range req.Checks {
		c := &req.Checks[i]
		r := c.Rule
		if r == nil {
			return fmt.Errorf("check %d has no rule", i)
		}
		if len(c.Values) != len(r.By) {
			return fmt.Errorf("rule %s: %d values for %d dimensions", r.Name, len(c.Values), len(r.By))
		}
		if c.Cost < 0 || c.Cost > MaxCost {
			return fmt.Errorf("rule %s: cost %d is outside 0..%d", r.Name, c.Cost, MaxCost)
		}
		if c.Limit < 0 || c.Limit > MaxLimit {
			return fmt.Errorf("rule %s: limit %d is outside 0..%d", r.Name, c.Limit, MaxLimit)
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
		if p.Sections[si].Cost != c.Cost {
			return fmt.Errorf("rules %s and %s share a log but not a cost", r.Name, req.Checks[p.firstCheck(si)].Rule.Name)
		}
		p.checkSec = append(p.checkSec, si)
	}
	if len(p.Sections) > maxSections {
		return fmt.Errorf("a request reads %d logs; at most %d", len(p.Sections), maxSections)
	}
	if p.Exempt = req.Exempt; p.Exempt {
		p.addExemptIDs()
	}
	for si := range p.Sections {
		s := &p.Sections[si]
		s.R0 = len(p.Rules)
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
				pr.Bounds = periodBounds(approx, r.Window.Unit, zone)
			} else {
				pr.Window = r.Window.Duration.Milliseconds()
			}
			p.Rules = append(p.Rules, pr)
			s.Retention = max(s.Retention, roundUpToSecond(r.Window.Retention()))
			maxLimit = max(maxLimit, r.Limit)
			bound = min(bound, grainBound(r))
		}
		s.R1 = len(p.Rules)
		s.Grain = grainFor(maxLimit, bound)
		if n := maxRecords(maxLimit, s.Retention, s.Grain); n > recordlog.MaxEntries {
			e := &LogTooLargeError{Records: n, MaxLimit: maxLimit,
				Grain: time.Duration(s.Grain) * time.Millisecond, Retention: time.Duration(s.Retention) * time.Millisecond}
			for _, pr := range p.Rules[s.R0:s.R1] {
				e.Rules = append(e.Rules, req.Checks[pr.check].Rule.Name)
			}
			return e
		}
	}
	return nil
}

// addExemptIDs appends the id of each section's exempt marks to buf, so
// that it outlives the decision as the sections' ids do.
func (p *Plan) addExemptIDs() {
	for si := range p.Sections {
		s := &p.Sections[si]
		s.e0 = len(p.buf)
		p.buf = recordlog.AppendExemptID(p.buf, p.buf[s.k1:s.s1])
		s.e1 = len(p.buf)
	}
}

// section returns the section of check i of req: an earlier one with the
// same key and sub-log, or a new one with the check's cost.
func (p *Plan) section(prefix string, req *Request, i int) int {
	c := &req.Checks[i]
	r := c.Rule
	k0 := len(p.buf)
	if j := earlierSameKey(req, i); j >= 0 {
		s := &p.Sections[p.checkSec[j]]
		p.buf = append(p.buf, p.buf[s.k0:s.k1]...) // escaped already
	} else {
		p.buf = appendKey(p.buf, prefix, r.By[0], c.Values[0], c.StoredForms&1 != 0)
	}
	k1 := len(p.buf)
	if c.Sub != "" {
		p.buf = append(p.buf, c.Sub...)
	} else {
		p.buf = appendSub(p.buf, r, c.Values, c.StoredForms)
	}
	s1 := len(p.buf)
	for j := range p.Sections {
		s := &p.Sections[j]
		if bytes.Equal(p.Key(s), p.buf[k0:k1]) && bytes.Equal(p.Sub(s), p.buf[k1:s1]) {
			p.buf = p.buf[:k0]
			return j
		}
	}
	p.Sections = append(p.Sections, Section{k0: k0, k1: k1, s1: s1, Cost: c.Cost})
	return len(p.Sections) - 1
}

// earlierSameLog returns an earlier check of req that reads the same log as
// check i for certain (the same dimensions in the same order, the same
// values and the same weight), or -1. Logs shared in other ways (the same
// dimensions listed in another order) are found by comparing the ids built.
func earlierSameLog(req *Request, i int) int {
	c := &req.Checks[i]
	for j := range i {
		o := &req.Checks[j]
		if o.Rule.Weight == c.Rule.Weight && o.Sub == c.Sub && o.StoredForms == c.StoredForms && slices.Equal(o.Rule.By, c.Rule.By) && slices.Equal(o.Values, c.Values) {
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
		if o.Rule.By[0] == c.Rule.By[0] && o.Values[0] == c.Values[0] && o.StoredForms&1 == c.StoredForms&1 {
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
			who, e.MaxLimit, e.Records, recordlog.MaxEntries, recordlog.MaxEntries/2)
	}
	return fmt.Sprintf("%s: a limit over %d (or a limit placeholder) merges records into buckets of %v, the finest the shortest window allows, kept %v: up to %d records in one log, more than the %d a log holds: lengthen the shortest window, or keep every limit of these rules at %d or less (exact records)",
		who, BucketThreshold, e.Grain, e.Retention, e.Records, recordlog.MaxEntries, BucketThreshold)
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
	p := GetPlan()
	defer p.Release()
	return p.Build("", req, time.Unix(0, 0).UTC())
}

// maxSections bounds the logs one request reads (and, since rules over one
// log share a section, the rules of a section): the Redis script packs
// these counts in a byte.
const maxSections = 255

// keySeen reports whether an earlier section has the same key as section
// si (so that a missing key is not looked up twice).
func (p *Plan) keySeen(si int) bool {
	for j := 0; j < si; j++ {
		if bytes.Equal(p.Key(&p.Sections[j]), p.Key(&p.Sections[si])) {
			return true
		}
	}
	return false
}

func (p *Plan) firstCheck(si int) int {
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
