package caddymodule

import (
	"testing"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// TestLimitPastInt64 proves that a per-request limit too long for an
// int64 counts as limiter.MaxLimit, as one past 2^40 does, with or
// without a fallback: it fell back to the rule's fallback (or, without
// one, was a 400), so a tier written "unlimited" as a long number got the
// default tier's limit. A negative one past int64 is still no limit.
func TestLimitPastInt64(t *testing.T) {
	for _, fallback := range []int64{0, 50} {
		cr := &compiledRule{rule: &limiter.Rule{Name: "tier_day"}, limitFallback: fallback}
		for _, tc := range []struct {
			s     string
			want  int64
			given bool
		}{
			{"99999999999999999999", limiter.MaxLimit, true},
			{"1099511627777", limiter.MaxLimit, true},
			{"7", 7, true},
			{"-99999999999999999999", fallback, false},
			{"0", fallback, false},
		} {
			n, given, fail := cr.limitOf(tc.s, "")
			if fallback == 0 && !tc.given {
				if fail == nil {
					t.Errorf("no fallback, %q: %d, want a 400", tc.s, n)
				}
				continue
			}
			if fail != nil || n != tc.want || given != tc.given {
				t.Errorf("fallback %d, %q: %d %v %v, want %d %v", fallback, tc.s, n, given, fail, tc.want, tc.given)
			}
		}
	}
}
