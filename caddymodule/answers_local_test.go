package caddymodule

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// TestLocalDenialIsNoNeverFits proves that a send the local fallback
// refuses for a cost above its share of a limit (on_error local 3: 4 of
// 10), but within the limit itself, is not told that no wait admits it:
// it fits once Redis answers (a probe's cost 7, tier 10, was so told). A
// cost above the limit itself still is.
func TestLocalDenialIsNoNeverFits(t *testing.T) {
	rule := &limiter.Rule{Name: "tiered", By: []string{"recipient"}, Limit: limiter.MaxLimit, Window: limiter.Window{Duration: time.Hour}}
	for _, c := range []struct {
		cost  int64
		never bool
	}{{7, false}, {11, true}} {
		req := &limiter.Request{Checks: []limiter.Check{{Rule: rule, Values: []string{"t2"}, Cost: c.cost, Limit: 10}}}
		d := &limiter.Decision{Denier: 0, RetryAfter: time.Hour, Fallback: errors.New("redis: timed out"),
			Results: []limiter.Result{{Rule: rule, Limit: 4, Denied: true, RetryAfter: time.Hour}}}
		p := newProblem(http.StatusTooManyRequests, req, d, nil)
		if got := strings.Contains(p.Detail, "no wait admits it"); got != c.never {
			t.Errorf("cost %d: detail %q", c.cost, p.Detail)
		}
	}
}
