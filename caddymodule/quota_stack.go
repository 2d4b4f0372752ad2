package caddymodule

import (
	"net/http"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// Cap sets that run one after another on a request (a route with two
// frequency_cap directives, as examples/fcm-gateway has: a topic's own
// cap, then the recipient's) each set the quota fields, and the later
// one's overwrote the earlier's: an admitted answer listed the last set's
// rules only, so a client that obeyed it was told it had quota left and
// then refused by the first set. So each cap set that passes a request on
// (admitted, a batch with entries left, or under dry_run) leaves its
// decision in a request variable, and a later one that passes it on too
// lists those rules before its own.

// passedVar is the request variable (caddyhttp vars) that holds what the
// cap sets before this one passed the request on with: a
// *limiter.Decision for one, a []*limiter.Decision for more.
const passedVar = "freqcap.passed_on"

// passedBefore returns the decisions of the cap sets that passed r on
// before this one, in the order they ran.
func passedBefore(r *http.Request) []*limiter.Decision {
	switch v := caddyhttp.GetVar(r.Context(), passedVar).(type) {
	case *limiter.Decision:
		return []*limiter.Decision{v}
	case []*limiter.Decision:
		return v
	}
	return nil
}

// notePassed records that r goes on with d, for the cap sets after this
// one. The first costs no allocation: a request nearly always meets one
// cap set.
func notePassed(r *http.Request, d *limiter.Decision) {
	ctx := r.Context()
	switch v := caddyhttp.GetVar(ctx, passedVar).(type) {
	case *limiter.Decision:
		caddyhttp.SetVar(ctx, passedVar, []*limiter.Decision{v, d})
	case []*limiter.Decision:
		caddyhttp.SetVar(ctx, passedVar, append(v[:len(v):len(v)], d))
	default:
		caddyhttp.SetVar(ctx, passedVar, d)
	}
}

// stackedResults returns the results the quota fields of d list: d's
// enforced ones, after those of the cap sets that passed the request on
// before it (before, given when d passes it on too). A refusal lists its
// own rules only: the earlier cap sets give their counts back (refund_on
// 429), and the client waits for the rule that refused it.
func stackedResults(d *limiter.Decision, before []*limiter.Decision) []limiter.Result {
	own := enforced(d.Results)
	if len(before) == 0 || len(own) == 0 {
		return own
	}
	var all []limiter.Result
	for _, e := range before {
		all = append(all, enforced(e.Results)...)
	}
	return append(all, own...)
}

// stackQuota returns what setQuotaHeaders lists before d's rules: when r
// passes on with d, the decisions of the cap sets that passed it on before
// this one, and notes d for those after it; nil when it does not pass (a
// refusal lists its own rules alone).
func stackQuota(r *http.Request, d *limiter.Decision, passes bool) []*limiter.Decision {
	if !passes {
		return nil
	}
	before := passedBefore(r)
	notePassed(r, d)
	return before
}
