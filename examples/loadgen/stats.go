package main

import (
	"fmt"
	"math"
	"sort"
)

// median is the middle of v (the mean of the two middle ones for an even
// count), 0 for none.
func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	return s[len(s)/2]
}

// estimate is a median over rounds and a 95 % confidence interval for it.
type estimate struct {
	median, lo, hi float64
	ok             bool // false: too few rounds for an interval (fewer than 6)
}

// medianCI is the median of v and a distribution-free 95 % confidence
// interval for the median of what v samples: the k-th smallest and k-th
// largest of v, for the largest k such that at most 2.5 % of samples of
// len(v) would have fewer than k values below the median (a binomial tail
// with p = 1/2). It assumes only that the rounds are independent; it needs
// no normal spread, which a p99 over a one-second slice of a shared machine
// does not have.
func medianCI(v []float64) estimate {
	e := estimate{median: median(v)}
	n := len(v)
	k := 0 // the interval is s[k-1], s[n-k]
	tail := 0.0
	for j := 0; j < n; j++ {
		tail += binomialHalf(n, j) // P(fewer than j+1 values below the median)
		if tail > 0.025 {
			break
		}
		k = j + 1
	}
	if k == 0 {
		return e
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	e.lo, e.hi, e.ok = s[k-1], s[n-k], true
	return e
}

// binomialHalf is P(X = j) for X binomial over n trials with p = 1/2.
func binomialHalf(n, j int) float64 {
	ln, _ := math.Lgamma(float64(n + 1))
	lj, _ := math.Lgamma(float64(j + 1))
	lnj, _ := math.Lgamma(float64(n - j + 1))
	return math.Exp(ln - lj - lnj - float64(n)*math.Ln2)
}

// format prints the median and, when there is one, its interval, each with
// verb: "0.951 (0.930 to 0.977)".
func (e estimate) format(verb string) string {
	s := fmt.Sprintf(verb, e.median)
	if e.ok {
		s += fmt.Sprintf(" ("+verb+" to "+verb+")", e.lo, e.hi)
	}
	return s
}
