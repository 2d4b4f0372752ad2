package caddymodule

import (
	"errors"
	"strconv"
	"strings"
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

// FuzzLimitOf holds a per-request limit to what the docs say a sender's
// text gives: a positive integer counts, at most 2^40 however long
// (limiter.MaxLimit); anything else takes the fallback, or is a 400
// without one; nothing panics, and no limit is 0 or past 2^40.
func FuzzLimitOf(f *testing.F) {
	for _, s := range []string{"7", "0", "-1", "+5", "05", " 5", "1099511627777", "99999999999999999999", "-99999999999999999999", "2.5", "", "abc"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, fallback := range []int64{0, 50} {
			cr := &compiledRule{rule: &limiter.Rule{Name: "tier_day"}, limitFallback: fallback}
			n, given, fail := cr.limitOf(s, "")
			parsed, err := strconv.ParseInt(s, 10, 64)
			positive, want := err == nil && parsed > 0, min(parsed, limiter.MaxLimit)
			if errors.Is(err, strconv.ErrRange) && !strings.HasPrefix(s, "-") {
				positive, want = true, limiter.MaxLimit
			}
			switch {
			case positive && (!given || fail != nil || n != want):
				t.Fatalf("%q, fallback %d: %d %v %v, want it given, at most 2^40", s, fallback, n, given, fail)
			case !positive && fallback > 0 && (given || fail != nil || n != fallback):
				t.Fatalf("%q: %d %v %v, want the fallback", s, n, given, fail)
			case !positive && fallback == 0 && fail == nil:
				t.Fatalf("%q without a fallback: %d, want a 400", s, n)
			case fail == nil && (n < 1 || n > limiter.MaxLimit):
				t.Fatalf("%q: limit %d", s, n)
			}
		}
	})
}
