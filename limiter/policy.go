package limiter

import (
	"time"

	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"
)

// This file is how a request's sending policy reaches the stores: a limit
// per check (Check.Limit), shadow checks (Check.Shadow) and exempt requests
// (Request.Exempt). The stores, Go and Lua alike, decide none of it: a
// waived rule is sent with liftedLimit, so it admits and records as any,
// and its true answer is worked out here from what it counted. So the two
// stores agree on policy as they agree on limits. All they know of exempt
// is to mark what an exempt request records (Plan.Exempt), for support to
// see; counting never reads the marks.

// liftedLimit is the limit a store sees for a waived rule: more than any
// log can count (counts fit in 48 bits on the wire; costs are far below).
const liftedLimit = 1 << 47

// newPlanRule is the plan's rule for check i of req: the limit the request
// is held to, and the one the store decides with.
func newPlanRule(i int, req *Request, c *Check) planRule {
	want := c.Rule.Limit
	if c.Limit > 0 {
		want = min(c.Limit, want)
	}
	pr := planRule{check: i, want: want, LogRule: recordlog.LogRule{Limit: want}}
	if c.Shadow || req.Exempt {
		pr.Limit, pr.waived = liftedLimit, true
	}
	return pr
}

// answer fills res from the store's answer for pr, whose section is sec.
func (pr *planRule) answer(res *Result, r recordlog.RawResult, sec *Section) {
	res.Limit = pr.want
	res.Used = r.Used
	res.Remaining = max(0, pr.want-r.Used)
	res.Reset = time.Duration(r.Reset) * time.Millisecond
	if !pr.waived {
		res.Denied = !r.Ok
		if res.Denied {
			res.RetryAfter = time.Duration(r.Retry) * time.Millisecond
		}
		return
	}
	// The store admitted it; it would have refused if what it counted
	// before this request, and this request, exceed the limit, unless the
	// request counts nothing (as recordlog's Evaluate admits it).
	res.Waived = true
	before := r.Used
	if sec.Recorded > 0 {
		before -= sec.Cost
	}
	res.Denied = sec.Cost > 0 && before+sec.Cost > pr.want
}
