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

// A record past MaxEntries merges the oldest two entries whose units fit
// one entry (skipping pairs that would pass MaxCost), at the later time:
// the log stays storable, its units all counted.
func TestRecordPastMaxEntriesMergesTheOldest(t *testing.T) {
	l := SubLog{Retention: 86_400_000}
	l.Entries = make([]Entry, MaxEntries)
	var units int64
	for i := range l.Entries {
		l.Entries[i] = Entry{T: int64(1000 + i), C: 1}
	}
	l.Entries[0].C, l.Entries[1].C = MaxCost, 2 // the first pair cannot merge
	for _, e := range l.Entries {
		units += e.C
	}
	at := l.Record(100_000, 3, 0)
	if len(l.Entries) != MaxEntries {
		t.Fatalf("%d entries, want %d", len(l.Entries), MaxEntries)
	}
	var sum int64
	for _, e := range l.Entries {
		sum += e.C
	}
	if sum != units+3 || at != 100_000 {
		t.Fatalf("units %d, want %d; recorded at %d", sum, units+3, at)
	}
	if l.Entries[0] != (Entry{T: 1000, C: MaxCost}) || l.Entries[1] != (Entry{T: 1002, C: 3}) {
		t.Fatalf("oldest entries %v, want the second and third merged at the third's time", l.Entries[:2])
	}
	if _, err := EncodeBlob(nil, &KeyLogs{Subs: []namedLog{{Id: []byte("r"), SubLog: l}}}); err != nil {
		t.Fatalf("the log cannot be stored: %v", err)
	}
}
