package limiter

import (
	"fmt"
	"sort"
	"time"
)

// A plan is a request turned into what both stores execute: its checks
// grouped by the log they read (one section per key and sub-log), with every
// window expressed in milliseconds.
type plan struct {
	sections []section
	nchecks  int
}

// section is one sub-log of one key and the rules that read it. All rules of
// a section count the same weight, so they share one cost.
type section struct {
	key       string
	sub       string
	retention int64 // ms, whole seconds: how long records stay
	grain     int64 // ms; 0 keeps every record, else records merge per grain
	cost      int64
	rules     []planRule
}

type planRule struct {
	check  int
	limit  int64
	window int64    // ms; 0 for a calendar rule
	bounds [4]int64 // calendar period starts, ms since the epoch
}

// BucketThreshold is the largest limit kept as exact records. A log read by
// a rule with a larger limit merges its records into buckets (see grainFor),
// so its memory is bounded by its retention divided by the bucket width,
// whatever the limit.
const BucketThreshold = 1000

// grainLadder lists the bucket widths in ms. Each divides the next, and all
// divide 15 minutes, so a bucket never straddles a local midnight in any
// zone whose UTC offset is a whole number of quarter hours (every zone in use
// today).
var grainLadder = [...]int64{10, 100, 1000, 10_000, 60_000, 900_000}

// grainFor picks the bucket width of a log: 0 (exact) when every limit is at
// most BucketThreshold; otherwise the widest ladder step that is at most a
// thousandth of the shortest rolling window, and at most one minute for a
// calendar day (15 minutes for a week or a month). A merged record takes the
// time of the latest request in it, so a rolling rule may count it up to one
// bucket longer than exact (never shorter: never over-admitting); calendar
// counts stay exact.
func grainFor(rules []*Rule) int64 {
	var maxLimit int64
	bound := grainLadder[len(grainLadder)-1]
	for _, r := range rules {
		if r.Limit > maxLimit {
			maxLimit = r.Limit
		}
		switch r.Window.Unit {
		case Rolling:
			bound = min(bound, r.Window.Duration.Milliseconds()/1000)
		case Day:
			bound = min(bound, 60_000)
		}
	}
	if maxLimit <= BucketThreshold {
		return 0
	}
	var g int64
	for _, step := range grainLadder {
		if step <= bound {
			g = step
		}
	}
	return g
}

// buildPlan groups the checks of req into sections. approx is the caller's
// idea of now, used only to choose candidate calendar periods.
func buildPlan(prefix string, req *Request, approx time.Time) (*plan, error) {
	p := &plan{nchecks: len(req.Checks)}
	rulesOf := make([][]*Rule, 0, len(req.Checks))
	for i := range req.Checks {
		c := &req.Checks[i]
		r := c.Rule
		if r == nil {
			return nil, fmt.Errorf("check %d has no rule", i)
		}
		if len(c.Values) != len(r.By) {
			return nil, fmt.Errorf("rule %s: %d values for %d dimensions", r.Name, len(c.Values), len(r.By))
		}
		if c.Cost < 0 {
			return nil, fmt.Errorf("rule %s: negative cost %d", r.Name, c.Cost)
		}
		key := keyFor(prefix, r.By[0], c.Values[0])
		sub := subOf(r, c.Values)
		si := -1
		for j := range p.sections {
			if p.sections[j].key == key && p.sections[j].sub == sub {
				si = j
				break
			}
		}
		if si < 0 {
			p.sections = append(p.sections, section{key: key, sub: sub, cost: c.Cost})
			rulesOf = append(rulesOf, nil)
			si = len(p.sections) - 1
		} else if p.sections[si].cost != c.Cost {
			return nil, fmt.Errorf("rules %s and %s share a log but not a cost", r.Name, p.sections[si].firstRule(req))
		}
		s := &p.sections[si]
		pr := planRule{check: i, limit: r.Limit}
		if r.Window.IsCalendar() {
			zone := c.Zone
			if zone == nil {
				zone = r.Window.zone()
			}
			pr.bounds = periodBounds(approx, r.Window.Unit, zone)
		} else {
			pr.window = r.Window.Duration.Milliseconds()
		}
		s.rules = append(s.rules, pr)
		s.retention = max(s.retention, roundUpToSecond(r.Window.retention()))
		rulesOf[si] = append(rulesOf[si], r)
	}
	for i := range p.sections {
		p.sections[i].grain = grainFor(rulesOf[i])
	}
	return p, nil
}

func (s *section) firstRule(req *Request) string { return req.Checks[s.rules[0].check].Rule.Name }

func roundUpToSecond(d time.Duration) int64 {
	return (d.Milliseconds() + 999) / 1000 * 1000
}

// subOf is the sub-log id of a rule's dimensions after the first, sorted by
// name so that rules over the same set share it whatever order they list.
func subOf(r *Rule, values []string) string {
	n := len(r.By) - 1
	if n == 0 {
		return subFor(nil, nil, r.Weight)
	}
	if n == 1 {
		return subFor(r.By[1:], values[1:], r.Weight)
	}
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i + 1
	}
	sort.Slice(idx, func(a, b int) bool { return r.By[idx[a]] < r.By[idx[b]] })
	dims := make([]string, n)
	vals := make([]string, n)
	for i, j := range idx {
		dims[i], vals[i] = r.By[j], values[j]
	}
	return subFor(dims, vals, r.Weight)
}

// finish turns per-rule raw answers (sections in order, rules in order
// within each) into a Decision.
func (p *plan) finish(req *Request, now int64, raw []rawResult, admitted bool) *Decision {
	d := &Decision{Allowed: admitted, Results: make([]Result, p.nchecks), Denier: -1, Now: time.UnixMilli(now)}
	k := 0
	for si := range p.sections {
		for _, pr := range p.sections[si].rules {
			r := raw[k]
			k++
			res := &d.Results[pr.check]
			res.Rule = req.Checks[pr.check].Rule
			res.Limit = pr.limit
			res.Used = r.used
			res.Remaining = max(0, pr.limit-r.used)
			res.Reset = time.Duration(r.reset) * time.Millisecond
			res.Denied = !r.ok
			if res.Denied {
				res.RetryAfter = time.Duration(r.retry) * time.Millisecond
			}
		}
	}
	for i := range d.Results {
		if d.Results[i].Denied && (d.Denier < 0 || d.Results[i].RetryAfter > d.RetryAfter) {
			d.Denier, d.RetryAfter = i, d.Results[i].RetryAfter
		}
	}
	return d
}

// rawResult is one rule's answer from a store, before finish.
type rawResult struct {
	used, reset, retry int64
	ok                 bool
}
