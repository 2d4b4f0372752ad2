package caddymodule

import (
	"fmt"
	"net/http"
	"strconv"

	"github.com/freqcap/caddy-freqcap/caddymodule/internal/reply"
)

// This file turns the texts a request gives a rule's cost and limit
// placeholders into numbers, for single sends and batch entries alike.
// where names a batch entry (" at 3.to") in the 400, or is empty.

// costOf is the cost the text s gives rule cr: a non-negative integer.
func (cr *compiledRule) costOf(s, where string) (int64, *reply.Failure) {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 {
		return 0, &reply.Failure{Status: http.StatusBadRequest, Reason: fmt.Sprintf("cost of rule %s is %q%s, not a non-negative integer", cr.rule.Name, s, where), Rule: cr.rule.Name}
	}
	return n, nil
}

// limitOf is the limit the text s gives rule cr: a positive integer, else
// the rule's fallback, else a 400.
func (cr *compiledRule) limitOf(s, where string) (int64, *reply.Failure) {
	n, err := strconv.ParseInt(s, 10, 64)
	switch {
	case err == nil && n > 0:
		return n, nil
	case cr.limitFallback > 0:
		return cr.limitFallback, nil
	}
	return 0, &reply.Failure{Status: http.StatusBadRequest, Reason: fmt.Sprintf("limit of rule %s is %q%s, not a positive integer, and the rule has no fallback", cr.rule.Name, s, where), Rule: cr.rule.Name}
}
