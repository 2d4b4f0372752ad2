package limiter

import (
	"fmt"
	"strings"
	"time"
)

// Quiet is a range of local times, repeated every day or on chosen days of
// the week, in which a quiet rule denies every request: the hours in which
// telemarketing law forbids SMS to a recipient, say 21:00-08:00 in the
// recipient's zone. Start is inclusive and End exclusive; a range whose End
// is not after its Start crosses midnight. A range belongs to the day it
// starts on: "21:00-08:00 on mon-fri" is quiet from Friday 21:00 to
// Saturday 08:00, and not on Monday before 08:00.
//
// Quiet ranges are decided by the caller's clock, not a store's: they read
// no history, so nothing is recorded and no store is asked. A range is of
// wall-clock readings: an instant is quiet when the zone's clock reads,
// then, a date and time within it, so a DST change shortens or lengthens
// a range as a wall clock would. A range that starts or ends at a time a
// spring-forward skips starts or ends at the change (22:00-02:30 on New
// York's spring-forward night ends at 03:00 daylight time, which follows
// 01:59:59 standard time); in an hour a fall-back repeats, both passes
// are quiet when the range holds their time (01:00-03:00 is quiet three
// hours that night).
//
// The zero value is quiet from midnight to midnight, every day; build one
// with ParseQuiet. A Quiet is immutable and safe for concurrent use.
type Quiet struct {
	// Start and End are minutes after local midnight, 0..1439; they differ.
	Start, End int
	// Days is a bit set of the weekdays (1<<time.Sunday ...) on which a
	// range may start; 0 means every day.
	Days uint8
	// Zone is the default zone; nil means UTC. A request may name another
	// (Check.Zone).
	Zone *time.Location
}

// ParseQuiet parses a range "HH:MM-HH:MM" (24-hour clock) and the days a
// range may start on: each a day name (mon, tue, wed, thu, fri, sat, sun)
// or a range of them (mon-fri, fri-mon wraps around the week); none means
// every day.
func ParseQuiet(span string, days []string) (Quiet, error) {
	a, b, ok := strings.Cut(span, "-")
	if !ok {
		return Quiet{}, fmt.Errorf("quiet range %q is not HH:MM-HH:MM", span)
	}
	var q Quiet
	var err error
	if q.Start, err = parseClock(a); err != nil {
		return Quiet{}, fmt.Errorf("quiet range %q: %w", span, err)
	}
	if q.End, err = parseClock(b); err != nil {
		return Quiet{}, fmt.Errorf("quiet range %q: %w", span, err)
	}
	if q.Start == q.End {
		return Quiet{}, fmt.Errorf("quiet range %q is empty: start and end must differ", span)
	}
	for _, d := range days {
		set, err := parseDays(d)
		if err != nil {
			return Quiet{}, err
		}
		q.Days |= set
	}
	return q, nil
}

// parseClock parses "HH:MM" into minutes after midnight.
func parseClock(s string) (int, error) {
	if len(s) != 5 || s[2] != ':' {
		return 0, fmt.Errorf("%q is not HH:MM", s)
	}
	digit := func(c byte) (int, bool) { return int(c - '0'), c >= '0' && c <= '9' }
	h1, ok1 := digit(s[0])
	h2, ok2 := digit(s[1])
	m1, ok3 := digit(s[3])
	m2, ok4 := digit(s[4])
	h, m := h1*10+h2, m1*10+m2
	if !ok1 || !ok2 || !ok3 || !ok4 || h > 23 || m > 59 {
		return 0, fmt.Errorf("%q is not a time from 00:00 to 23:59", s)
	}
	return h*60 + m, nil
}

var dayNames = [7]string{"sun", "mon", "tue", "wed", "thu", "fri", "sat"}

func parseDay(s string) (time.Weekday, error) {
	for i, n := range dayNames {
		if s == n {
			return time.Weekday(i), nil
		}
	}
	return 0, fmt.Errorf("unknown day %q (want mon, tue, wed, thu, fri, sat, sun or a range such as mon-fri)", s)
}

// parseDays parses a day or a range of days into a bit set.
func parseDays(s string) (uint8, error) {
	a, b, isRange := strings.Cut(s, "-")
	from, err := parseDay(a)
	if err != nil {
		return 0, err
	}
	to := from
	if isRange {
		if to, err = parseDay(b); err != nil {
			return 0, err
		}
	}
	var set uint8
	for d := from; ; d = (d + 1) % 7 {
		set |= 1 << d
		if d == to {
			return set, nil
		}
	}
}

// Until reports whether t lies in a quiet range in zone (nil: q.Zone), and
// if so how long until the zone's clock leaves it: at least 1ms.
func (q Quiet) Until(t time.Time, zone *time.Location) (time.Duration, bool) {
	if zone == nil {
		zone = q.Zone
		if zone == nil {
			zone = time.UTC
		}
	}
	local := t.In(zone)
	now := readingOf(local)
	y, m, d := now.Date()
	// Only a range starting today or yesterday can hold t: one that
	// crosses midnight ends on the day after its start. Ranges never
	// overlap (yesterday's ends at End today, not after today's Start).
	for back := 0; back <= 1; back++ {
		day := d - back
		start := time.Date(y, m, day, q.Start/60, q.Start%60, 0, 0, time.UTC)
		if q.Days != 0 && q.Days&(1<<start.Weekday()) == 0 {
			continue
		}
		endDay := day
		if q.End <= q.Start {
			endDay++
		}
		end := time.Date(y, m, endDay, q.End/60, q.End%60, 0, 0, time.UTC)
		if !now.Before(start) && now.Before(end) {
			return max(leaves(local, start, end).Sub(t), time.Millisecond), true
		}
	}
	return 0, false
}

// leaves is the first instant after t (whose reading is in [start, end))
// at which its location's clock reads outside [start, end): when it reads
// end, when a spring-forward skips past end, or when a fall-back sets it
// back before start.
func leaves(t time.Time, start, end time.Time) time.Time {
	p := t
	for range 8 {
		_, offset := p.Zone()
		at := end.Add(-time.Duration(offset) * time.Second)
		_, change := p.ZoneBounds()
		if change.IsZero() || at.Before(change) {
			return at
		}
		p = change
		if r := readingOf(p); r.Before(start) || !r.Before(end) {
			return p
		}
	}
	return p
}

// Length is the nominal length of a range: the time from start to end on a
// day without a DST change.
func (q Quiet) Length() time.Duration {
	n := q.End - q.Start
	if n <= 0 {
		n += 24 * 60
	}
	return time.Duration(n) * time.Minute
}

// String is the range as configured: "quiet 21:00-08:00 mon-fri
// America/New_York" (days only when not every day; zone shown as given,
// or zone's name when not nil).
func (q Quiet) String(zone *time.Location) string {
	if zone == nil {
		zone = q.Zone
		if zone == nil {
			zone = time.UTC
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "quiet %02d:%02d-%02d:%02d", q.Start/60, q.Start%60, q.End/60, q.End%60)
	if q.Days != 0 && q.Days != 0x7f {
		// Monday first, as a week is written.
		for i := 1; i <= 7; i++ {
			if d := i % 7; q.Days&(1<<d) != 0 {
				b.WriteString(" " + dayNames[d])
			}
		}
	}
	b.WriteString(" " + zone.String())
	return b.String()
}
