package limiter

import "testing"

// A log refuses a refund past maxEntries tombs: more could not be stored,
// and a log that cannot be stored would lose every record it holds.
func TestRefundsStopAtMaxTombs(t *testing.T) {
	l := subLog{retention: 86_400_000, tombs: make([]int64, maxEntries)}
	l.entries = []entry{{t: 5000, c: 1}}
	if l.refund(5000, 1, 0, 6000) {
		t.Fatal("refund accepted past maxEntries tombs")
	}
	l.tombs = l.tombs[:maxEntries-1]
	if !l.refund(5000, 1, 0, 6000) {
		t.Fatal("refund refused below maxEntries tombs")
	}
}
