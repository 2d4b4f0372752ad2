package caddymodule

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/freqcap/caddy-freqcap/caddymodule/internal/reply"
	"github.com/freqcap/caddy-freqcap/limiter"
)

// This file turns the texts a request gives a rule's cost and limit
// placeholders into numbers, for single sends and batch entries alike.
// where names a batch entry (" at 3.to") in the 400, or is empty.

// costOf is the cost the text s gives rule cr: an integer from 0 to
// limiter.MaxCost. A larger one is refused, never cut short or let
// overflow a sum: a store would count it otherwise than the sender meant.
func (cr *compiledRule) costOf(s, where string) (int64, *reply.Failure) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > limiter.MaxCost {
		return 0, &reply.Failure{Status: http.StatusBadRequest, Reason: fmt.Sprintf("cost of rule %s is %q%s, not an integer from 0 to %d", cr.rule.Name, s, where, limiter.MaxCost), Rule: cr.rule.Name}
	}
	return n, nil
}

// limitOf is the limit the text s gives rule cr: a positive integer (at
// most limiter.MaxLimit, which the rule's own limit caps it at anyway),
// else the rule's fallback (given is then false), else a 400.
func (cr *compiledRule) limitOf(s, where string) (limit int64, given bool, fail *reply.Failure) {
	n, err := strconv.ParseInt(s, 10, 64)
	if errors.Is(err, strconv.ErrRange) && n > 0 {
		// Past int64: past MaxLimit too, as the docs promise, not the
		// fallback (a tier of "unlimited" written as a long number).
		n, err = limiter.MaxLimit, nil
	}
	switch {
	case err == nil && n > 0:
		return min(n, limiter.MaxLimit), true, nil
	case cr.limitFallback > 0:
		return cr.limitFallback, false, nil
	}
	return 0, false, &reply.Failure{Status: http.StatusBadRequest, Reason: fmt.Sprintf("limit of rule %s is %q%s, not a positive integer, and the rule has no fallback", cr.rule.Name, s, where), Rule: cr.rule.Name}
}
