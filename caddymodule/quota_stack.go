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
// then refused by the first set. So each cap set that admits a request
// leaves its decision in a request variable, and a later one that admits
// it too lists those rules before its own.

// admittedVar is the request variable (caddyhttp vars) that holds what the
// cap sets before this one admitted the request with: a *limiter.Decision
// for one, a []*limiter.Decision for more.
const admittedVar = "freqcap.admitted"

// admittedBefore returns the decisions of the cap sets that admitted r
// before this one, in the order they ran.
func admittedBefore(r *http.Request) []*limiter.Decision {
	switch v := caddyhttp.GetVar(r.Context(), admittedVar).(type) {
	case *limiter.Decision:
		return []*limiter.Decision{v}
	case []*limiter.Decision:
		return v
	}
	return nil
}

// noteAdmitted records that d admitted r, for the cap sets after this
// one. The first costs no allocation: a request nearly always meets one
// cap set.
func noteAdmitted(r *http.Request, d *limiter.Decision) {
	ctx := r.Context()
	switch v := caddyhttp.GetVar(ctx, admittedVar).(type) {
	case *limiter.Decision:
		caddyhttp.SetVar(ctx, admittedVar, []*limiter.Decision{v, d})
	case []*limiter.Decision:
		caddyhttp.SetVar(ctx, admittedVar, append(v[:len(v):len(v)], d))
	default:
		caddyhttp.SetVar(ctx, admittedVar, d)
	}
}

// stackedResults returns the results the quota fields of d list: d's
// enforced ones, after those of the cap sets that admitted the request
// before it when d admits it too. A refusal lists its own rules only:
// the earlier cap sets give their counts back (refund_on 429), and the
// client waits for the rule that refused it.
func stackedResults(d *limiter.Decision, before []*limiter.Decision) []limiter.Result {
	own := enforced(d.Results)
	if !d.Allowed || len(before) == 0 || len(own) == 0 {
		return own
	}
	var all []limiter.Result
	for _, e := range before {
		all = append(all, enforced(e.Results)...)
	}
	return append(all, own...)
}
