package limiter

import "time"

// This file reads instants as a zone's wall clock shows them. Calendar
// periods and quiet ranges are wall-clock times ("midnight", "21:00"), and a
// DST change skips some readings and repeats others. time.Date cannot place
// them: for a reading a change skips it gives an instant before the change
// in zones west of UTC and after it east of UTC, and for a repeated one it
// picks either pass (its documentation leaves both unspecified). So a
// reading is written as a time in UTC (its date and clock, no offset), and
// compared with the reading of an instant.

// readingOf is the date and clock that t's location shows at t, as a time in
// UTC.
func readingOf(t time.Time) time.Time {
	_, offset := t.Zone()
	return t.UTC().Add(time.Duration(offset) * time.Second)
}

// maxOffset is more than any zone's distance from UTC, past or present
// (local mean times included).
const maxOffset = 26 * time.Hour

// firstReading is the first instant whose reading on loc's clock is at or
// after wall: the instant the clock shows wall or, when a DST change skips
// wall, the change (Santiago's 2026-09-06 has no midnight: its day starts at
// the change, which the clock reads 01:00). A reading shown twice is at its
// first pass.
func firstReading(wall time.Time, loc *time.Location) time.Time {
	// From an instant whose reading is surely earlier, walk the spans of
	// one offset: in a span the reading is the instant plus the offset.
	p := wall.Add(-maxOffset).In(loc)
	for range 8 {
		_, offset := p.Zone()
		at := wall.Add(-time.Duration(offset) * time.Second).In(loc)
		_, end := p.ZoneBounds()
		if end.IsZero() || at.Before(end) {
			return at
		}
		// The offset changes at end; a change forward may skip past wall.
		if p = end; !readingOf(p).Before(wall) {
			return p
		}
	}
	return p
}
