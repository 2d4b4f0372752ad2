package limiter_test

import (
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// TestQuietAtDSTChanges proves that a quiet range is of wall-clock
// readings on both sides of UTC: a range that starts or ends at a time a
// spring-forward skips starts or ends at the change, and each pass of an
// hour a fall-back repeats is quiet when the range holds its time. Go's
// time.Date places a skipped time an hour early west of UTC and late east
// of it, and a repeated one at either pass: a range placed with it lost 30
// minutes to an hour on those nights, or denied before it began.
func TestQuietAtDSTChanges(t *testing.T) {
	in := func(name, local, offset string) time.Time {
		t.Helper()
		v, err := time.Parse("2006-01-02 15:04 -07:00", local+" "+offset)
		if err != nil {
			t.Fatal(err)
		}
		return v.In(limitertest.MustZone(t, name))
	}
	const h, m = time.Hour, time.Minute
	for _, c := range []struct {
		name, span string
		days       []string
		t          time.Time
		quiet      bool
		until      time.Duration
	}{
		// New York, 2026-03-08: 02:00 EST becomes 03:00 EDT.
		{"end skipped, west", "22:00-02:30", nil, in("America/New_York", "2026-03-08 01:45", "-05:00"), true, 15 * m},
		{"end skipped, from the start", "22:00-02:30", nil, in("America/New_York", "2026-03-07 22:00", "-05:00"), true, 4 * h},
		{"range inside the gap's hour", "01:15-02:15", nil, in("America/New_York", "2026-03-08 01:30", "-05:00"), true, 30 * m},
		{"start skipped: not before it", "02:30-07:00", nil, in("America/New_York", "2026-03-08 01:45", "-05:00"), false, 0},
		{"start skipped: from the change", "02:30-07:00", nil, in("America/New_York", "2026-03-08 03:00", "-04:00"), true, 4 * h},
		// Santiago, 2026-09-06: midnight -04 becomes 01:00 -03.
		{"midnight skipped", "23:00-00:00", nil, in("America/Santiago", "2026-09-05 23:30", "-04:00"), true, 30 * m},
		{"past a skipped midnight", "22:00-00:30", nil, in("America/Santiago", "2026-09-05 23:45", "-04:00"), true, 15 * m},
		// Havana, 2026-03-08 is a Sunday: 00:00 -05 becomes 01:00 -04.
		{"days, midnight skipped", "23:30-00:30", []string{"sat"}, in("America/Havana", "2026-03-07 23:45", "-05:00"), true, 15 * m},
		// Berlin, 2026-03-29: 02:00 CET becomes 03:00 CEST.
		{"start skipped, east", "02:30-07:00", nil, in("Europe/Berlin", "2026-03-29 03:15", "+02:00"), true, 3*h + 45*m},
		{"end skipped, east", "22:00-02:30", nil, in("Europe/Berlin", "2026-03-29 03:00", "+02:00"), false, 0},
		// Berlin, 2026-10-25: 03:00 CEST becomes 02:00 CET.
		{"repeated hour, first pass, east", "02:00-04:00", nil, in("Europe/Berlin", "2026-10-25 02:30", "+02:00"), true, 2*h + 30*m},
		{"repeated hour, second pass, east", "02:00-04:00", nil, in("Europe/Berlin", "2026-10-25 02:30", "+01:00"), true, 90 * m},
		// Lord Howe, 2026-04-05: 02:00 +11 becomes 01:30 +10:30.
		{"half-hour fall-back, first pass", "01:30-06:00", nil, in("Australia/Lord_Howe", "2026-04-05 01:45", "+11:00"), true, 4*h + 45*m},
		// New York, 2026-11-01: 02:00 EDT becomes 01:00 EST. The wall clock
		// leaves 22:00-01:30 at 01:30 EDT and comes back at 01:00 EST.
		{"repeated hour leaves the range", "22:00-01:30", nil, in("America/New_York", "2026-11-01 01:15", "-04:00"), true, 15 * m},
		{"repeated hour between passes", "22:00-01:30", nil, in("America/New_York", "2026-11-01 01:45", "-04:00"), false, 0},
		{"repeated hour comes back", "22:00-01:30", nil, in("America/New_York", "2026-11-01 01:15", "-05:00"), true, 15 * m},
		{"set back before the start", "01:30-03:00", nil, in("America/New_York", "2026-11-01 01:45", "-04:00"), true, 15 * m},
	} {
		t.Run(c.name, func(t *testing.T) {
			q := mustQuiet(t, c.span, c.days...)
			until, quiet := q.Until(c.t, c.t.Location())
			if quiet != c.quiet || until != c.until {
				t.Errorf("%s at %s: Until = %s, %v; want %s, %v", c.span, c.t.Format(time.RFC3339), until, quiet, c.until, c.quiet)
			}
		})
	}
}

// TestQuietFollowsTheWallClock compares Until, minute by minute for 2½
// days around every DST change of a year, in zones on both sides of UTC
// (half-hour changes, skipped midnights, a midnight repeated), with a model
// that reads each minute's wall clock: quiet when the clock reads a time in
// a range that starts on a chosen day, until the first minute that is not.
func TestQuietFollowsTheWallClock(t *testing.T) {
	zones := []string{"America/New_York", "Europe/Berlin", "Australia/Lord_Howe", "America/Santiago", "America/Havana", "Atlantic/Azores", "America/St_Johns"}
	spans := []string{"22:00-02:30", "22:00-01:30", "02:30-07:00", "23:30-00:30", "23:00-00:00", "01:15-02:15", "00:00-01:00"}
	daySets := [][]string{nil, {"sat"}, {"mon-fri"}}
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, name := range zones {
		loc := limitertest.MustZone(t, name)
		for _, change := range offsetChanges(loc, from, from.AddDate(1, 0, 0)) {
			start := change.Add(-30 * time.Hour).Truncate(time.Minute)
			const minutes, after = 60 * 60, 30 * 60 // the minutes checked, and those read past them
			for _, span := range spans {
				for _, days := range daySets {
					q := mustQuiet(t, span, days...)
					quiet := make([]bool, minutes+after)
					for i := range quiet {
						quiet[i] = wallClockQuiet(q, start.Add(time.Duration(i)*time.Minute).In(loc))
					}
					leave := len(quiet)
					for i := len(quiet) - 1; i >= 0; i-- {
						if !quiet[i] {
							leave = i
						}
						if i >= minutes {
							continue
						}
						at := start.Add(time.Duration(i) * time.Minute)
						until, got := q.Until(at, loc)
						var want time.Duration
						if quiet[i] {
							want = time.Duration(leave-i) * time.Minute
						}
						if got != quiet[i] || until != want {
							t.Fatalf("%s, %s %v at %s: Until = %s, %v; the wall clock says %s, %v",
								name, span, days, at.In(loc).Format("2006-01-02 15:04 -07:00"), until, got, want, quiet[i])
						}
					}
				}
			}
		}
	}
}

// wallClockQuiet is the model: t's clock reads a time in q's range, on a
// day the range may start on (the part past midnight of a crossing range
// belongs to the day before).
func wallClockQuiet(q limiter.Quiet, t time.Time) bool {
	minute := t.Hour()*60 + t.Minute()
	y, mo, d := t.Date()
	startsOn := func(back int) bool {
		wd := time.Date(y, mo, d-back, 12, 0, 0, 0, time.UTC).Weekday()
		return q.Days == 0 || q.Days&(1<<wd) != 0
	}
	if q.End > q.Start {
		return startsOn(0) && minute >= q.Start && minute < q.End
	}
	return startsOn(0) && minute >= q.Start || startsOn(1) && minute < q.End
}

// offsetChanges lists the instants, to 15 minutes, at which loc's offset
// changes in [from, to).
func offsetChanges(loc *time.Location, from, to time.Time) []time.Time {
	var out []time.Time
	_, last := from.In(loc).Zone()
	for at := from; at.Before(to); at = at.Add(15 * time.Minute) {
		if _, off := at.In(loc).Zone(); off != last {
			out, last = append(out, at), off
		}
	}
	return out
}
