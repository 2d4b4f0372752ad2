package limiter

import "time"

// This file is how a request's sending policy reaches the stores: a limit
// per check (Check.Limit), shadow checks (Check.Shadow) and exempt requests
// (Request.Exempt). The stores, Go and Lua alike, know none of it: a
// waived rule is sent with liftedLimit, so it admits and records as any,
// and its true answer is worked out here from what it counted. So the two
// stores agree on policy as they agree on limits, and the wire format is
// unchanged.

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
	pr := planRule{check: i, limit: want, want: want}
	if c.Shadow || req.Exempt {
		pr.limit, pr.waived = liftedLimit, true
	}
	return pr
}

// answer fills res from the store's answer for pr, whose section is sec.
func (pr *planRule) answer(res *Result, r rawResult, sec *section) {
	res.Limit = pr.want
	res.Used = r.used
	res.Remaining = max(0, pr.want-r.used)
	res.Reset = time.Duration(r.reset) * time.Millisecond
	if !pr.waived {
		res.Denied = !r.ok
		if res.Denied {
			res.RetryAfter = time.Duration(r.retry) * time.Millisecond
		}
		return
	}
	// The store admitted it; it would have refused if what it counted
	// before this request, and this request, exceed the limit.
	res.Waived = true
	before := r.used
	if sec.recorded > 0 {
		before -= sec.cost
	}
	res.Denied = before+sec.cost > pr.want
}
