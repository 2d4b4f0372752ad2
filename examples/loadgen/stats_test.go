package main

import "testing"

// TestMedianCI proves the interval's order statistics against binomial
// tables: 5 rounds give no 95 % interval, 6 to 8 give the extremes
// (P(X ≤ 0) = 1/64 ≤ 0.025 for 6, P(X ≤ 1) = 9/256 > 0.025 for 8), 20 give
// the 6th smallest and largest (P(X ≤ 5) = 0.0207), 60 the 22nd
// (P(X ≤ 21) = 0.0136, P(X ≤ 22) = 0.0259).
func TestMedianCI(t *testing.T) {
	seq := func(n int) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = float64(n - i) // reversed: medianCI must sort
		}
		return v
	}
	if e := medianCI(seq(5)); e.ok || e.median != 3 {
		t.Errorf("5 rounds: %+v, want median 3 and no interval", e)
	}
	for _, c := range []struct {
		n      int
		lo, hi float64
	}{{6, 1, 6}, {8, 1, 8}, {20, 6, 15}, {60, 22, 39}} {
		e := medianCI(seq(c.n))
		if !e.ok || e.lo != c.lo || e.hi != c.hi {
			t.Errorf("%d rounds: %+v, want %v to %v", c.n, e, c.lo, c.hi)
		}
	}
}
