package limiter

import (
	"testing"
	"time"
)

// TestPeriodStartWhereMidnightIsSkipped proves that a day whose midnight a
// DST change skips starts at the change, in zones west of UTC too: Go's
// time.Date put Santiago's 2026-09-06 midnight at 23:00 the day before, so
// that day's period bounds were [prev, cur, cur, cur], every decision with
// a calendar rule in that zone failed for 25 hours as a clock skew, and
// under on_error allow every cap of such a request was skipped.
func TestPeriodStartWhereMidnightIsSkipped(t *testing.T) {
	for _, c := range []struct {
		zone, at string
		unit     Unit
		start    string
	}{
		{"America/Santiago", "2026-09-06T12:00:00-03:00", Day, "2026-09-06T01:00:00-03:00"},
		{"America/Santiago", "2026-09-06T01:00:00-03:00", Day, "2026-09-06T01:00:00-03:00"},
		{"America/Santiago", "2026-09-05T23:59:59-04:00", Day, "2026-09-05T00:00:00-04:00"},
		{"America/Havana", "2026-03-08T12:00:00-04:00", Day, "2026-03-08T01:00:00-04:00"},
		{"Atlantic/Azores", "2026-03-29T12:00:00+00:00", Day, "2026-03-29T01:00:00+00:00"},
		{"America/Asuncion", "2023-10-15T12:00:00-03:00", Month, "2023-10-01T01:00:00-03:00"},
		{"Asia/Beirut", "2023-03-26T12:00:00+03:00", Day, "2023-03-26T01:00:00+03:00"},
		// A fall-back that repeats midnight: the day starts at its first pass.
		{"America/Havana", "2026-11-01T12:00:00-05:00", Day, "2026-11-01T00:00:00-04:00"},
	} {
		loc := mustZone(t, c.zone)
		got := PeriodStart(mustTime(t, c.at).In(loc), c.unit)
		if want := mustTime(t, c.start); !got.Equal(want) {
			t.Errorf("%s %s: PeriodStart = %s, want %s", c.zone, c.at, got.Format(time.RFC3339), want.Format(time.RFC3339))
		}
	}
}

// TestCalendarPeriodsFollowTheWallClock compares the period bounds, every
// 20 minutes for 2½ days around every DST change of a year (and Samoa's
// skipped 2011-12-30), in zones on both sides of UTC, with a model: a
// period starts at the first second whose wall-clock date is its first
// date, found by bisection; the four bounds are the previous, current,
// next and following periods, each longer than zero.
func TestCalendarPeriodsFollowTheWallClock(t *testing.T) {
	year := [2]time.Time{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), time.Date(2027, 1, 1, 0, 0, 0, 0, time.UTC)}
	for _, z := range []struct {
		name     string
		from, to time.Time
	}{
		{"UTC", year[0], year[0].AddDate(0, 0, 1)},
		{"America/New_York", year[0], year[1]},
		{"Europe/Berlin", year[0], year[1]},
		{"Australia/Lord_Howe", year[0], year[1]},
		{"America/Santiago", year[0], year[1]},
		{"America/Havana", year[0], year[1]},
		{"Atlantic/Azores", year[0], year[1]},
		{"Pacific/Chatham", year[0], year[1]},
		{"America/Asuncion", time.Date(2023, 9, 1, 0, 0, 0, 0, time.UTC), time.Date(2023, 12, 1, 0, 0, 0, 0, time.UTC)},
		{"Pacific/Apia", time.Date(2011, 12, 20, 0, 0, 0, 0, time.UTC), time.Date(2012, 1, 10, 0, 0, 0, 0, time.UTC)},
	} {
		loc := mustZone(t, z.name)
		changes := []time.Time{z.from}
		_, last := z.from.In(loc).Zone()
		for at := z.from; at.Before(z.to); at = at.Add(15 * time.Minute) {
			if _, off := at.In(loc).Zone(); off != last {
				changes, last = append(changes, at), off
			}
		}
		for _, change := range changes {
			for at := change.Add(-30 * time.Hour); at.Before(change.Add(30 * time.Hour)); at = at.Add(20 * time.Minute) {
				for _, u := range []Unit{Day, Week, Month} {
					b := periodBounds(at, u, loc)
					cur := modelPeriodStart(at.In(loc), u)
					prev := modelPeriodStart(cur.Add(-time.Second), u)
					next := modelNextPeriod(cur, u)
					want := [4]int64{prev.UnixMilli(), cur.UnixMilli(), next.UnixMilli(), modelNextPeriod(next, u).UnixMilli()}
					if b != want || !(b[0] < b[1] && b[1] < b[2] && b[2] < b[3]) {
						t.Fatalf("%s, unit %d, at %s: bounds %v, the wall clock says %v", z.name, u, at.In(loc).Format(time.RFC3339), b, want)
					}
				}
			}
		}
	}
}

// modelPeriodStart is the first second whose date on t's clock is the
// first date of t's period.
func modelPeriodStart(t time.Time, u Unit) time.Time {
	y, m, d := t.Date()
	switch u {
	case Week:
		d -= (int(t.Weekday()) + 6) % 7
	case Month:
		d = 1
	}
	return firstSecondOf(time.Date(y, m, d, 0, 0, 0, 0, time.UTC), t.Location())
}

func modelNextPeriod(start time.Time, u Unit) time.Time {
	y, m, d := start.Date()
	switch u {
	case Day:
		d++
	case Week:
		d += 7
	case Month:
		m++
	}
	return firstSecondOf(time.Date(y, m, d, 0, 0, 0, 0, time.UTC), start.Location())
}

// firstSecondOf bisects for the first second whose date on loc's clock is
// date's or later.
func firstSecondOf(date time.Time, loc *time.Location) time.Time {
	y, m, d := date.Date()
	want := y*10000 + int(m)*100 + d
	lo, hi := date.Add(-48*time.Hour).Unix(), date.Add(48*time.Hour).Unix()
	for lo < hi {
		mid := lo + (hi-lo)/2
		if y, m, d := time.Unix(mid, 0).In(loc).Date(); y*10000+int(m)*100+d >= want {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return time.Unix(lo, 0).In(loc)
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	loc, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return loc
}

func mustTime(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
