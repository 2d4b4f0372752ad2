package recordlog

import (
	"testing"
)

// A log refuses a refund past maxEntries tombs: more could not be stored,
// and a log that cannot be stored would lose every record it holds.
func TestRefundsStopAtMaxTombs(t *testing.T) {
	l := SubLog{Retention: 86_400_000, tombs: make([]int64, MaxEntries)}
	l.Entries = []Entry{{T: 5000, C: 1}}
	if l.Refund(5000, 1, 0, 6000) {
		t.Fatal("refund accepted past maxEntries tombs")
	}
	l.tombs = l.tombs[:MaxEntries-1]
	if !l.Refund(5000, 1, 0, 6000) {
		t.Fatal("refund refused below maxEntries tombs")
	}
}
