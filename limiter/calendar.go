package limiter

import (
	"sync"
	"time"
)

// PeriodStart is the start of the calendar period of unit u that contains t,
// in t's location: local midnight of the day, of the Monday of the week, or of
// the first of the month. A midnight that a DST change skips starts its
// period at the change, the first instant of that date (see firstReading).
func PeriodStart(t time.Time, u Unit) time.Time {
	y, m, d := t.Date()
	switch u {
	case Week:
		// Monday is the first day: Go's Sunday is 0, so shift by 6 mod 7.
		d -= (int(t.Weekday()) + 6) % 7
	case Month:
		d = 1
	}
	return firstReading(time.Date(y, m, d, 0, 0, 0, 0, time.UTC), t.Location())
}

// nextPeriod is the start of the period of unit u after the one starting at
// start.
func nextPeriod(start time.Time, u Unit) time.Time {
	y, m, d := start.Date()
	switch u {
	case Day:
		d++
	case Week:
		d += 7
	case Month:
		m++
	}
	return firstReading(time.Date(y, m, d, 0, 0, 0, 0, time.UTC), start.Location())
}

// periodBounds returns four consecutive period starts in ms since the epoch:
// the previous period's, the current one's (the period holding approx), the
// next one's and the one after. The store picks the period that holds its
// own clock's "now" among them, so a gateway clock that is off by less than a
// period still gives the right answer. They are the same for every approx
// in the current period, so the last ones of each zone and unit are kept.
func periodBounds(approx time.Time, u Unit, zone *time.Location) [4]int64 {
	key := boundsKey{zone, u}
	ms := approx.UnixMilli()
	if b, ok := lastBounds.Load(key); ok {
		if b := b.(*[4]int64); b[1] <= ms && ms < b[2] {
			return *b
		}
	}
	cur := PeriodStart(approx.In(zone), u)
	prev := PeriodStart(cur.Add(-time.Hour), u)
	next := nextPeriod(cur, u)
	after := nextPeriod(next, u)
	b := [4]int64{prev.UnixMilli(), cur.UnixMilli(), next.UnixMilli(), after.UnixMilli()}
	lastBounds.Store(key, &b)
	return b
}

// lastBounds are the last period bounds made for each zone and unit: a
// zone is an IANA name (a request's unknown zone is the rule's), so there
// are at most a few thousand.
var lastBounds sync.Map // boundsKey -> *[4]int64

type boundsKey struct {
	zone *time.Location
	unit Unit
}
