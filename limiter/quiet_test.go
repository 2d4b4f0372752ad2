package limiter_test

import (
	"strings"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

func TestQuietUntil(t *testing.T) {
	ny := limitertest.MustZone(t, "America/New_York")
	sh := limitertest.MustZone(t, "Asia/Shanghai")
	at := func(s string, z *time.Location) time.Time {
		t.Helper()
		v, err := time.ParseInLocation("2006-01-02 15:04:05", s, z)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	night := mustQuiet(t, "21:00-08:00")
	night.Zone = ny
	weeknights := mustQuiet(t, "21:00-08:00", "mon-fri")
	weeknights.Zone = ny
	weekend := mustQuiet(t, "00:00-12:00", "sat", "sun")
	lunch := mustQuiet(t, "12:00-13:30")
	lunch.Zone = ny
	early := mustQuiet(t, "01:00-03:00") // holds New York's DST changes
	early.Zone = ny
	for _, c := range []struct {
		name  string
		q     limiter.Quiet
		t     time.Time
		zone  *time.Location // the request's, nil for the rule's
		quiet bool
		until time.Duration
	}{
		{"before the start", night, at("2026-06-10 20:59:59", ny), nil, false, 0},
		{"start is inclusive", night, at("2026-06-10 21:00:00", ny), nil, true, 11 * time.Hour},
		{"evening", night, at("2026-06-10 22:30:00", ny), nil, true, 9*time.Hour + 30*time.Minute},
		{"at midnight", night, at("2026-06-11 00:00:00", ny), nil, true, 8 * time.Hour},
		{"after midnight", night, at("2026-06-11 07:59:59", ny), nil, true, time.Second},
		{"end is exclusive", night, at("2026-06-11 08:00:00", ny), nil, false, 0},
		{"daytime", night, at("2026-06-11 12:00:00", ny), nil, false, 0},
		{"sub-second until", night, at("2026-06-11 07:59:59", ny).Add(250 * time.Millisecond), nil, true, 750 * time.Millisecond},
		{"not crossing midnight", lunch, at("2026-06-11 13:00:00", ny), nil, true, 30 * time.Minute},
		{"not crossing midnight, after", lunch, at("2026-06-11 13:30:00", ny), nil, false, 0},

		// The request's zone: 22:00 in Shanghai is 10:00 in New York.
		{"request zone quiet", night, at("2026-06-10 22:00:00", sh), sh, true, 10 * time.Hour},
		{"request zone not quiet", night, at("2026-06-10 22:00:00", sh), ny, false, 0},
		{"default zone UTC", mustQuiet(t, "21:00-08:00"), at("2026-06-10 21:00:00", time.UTC), nil, true, 11 * time.Hour},

		// Spring forward, Sunday 2026-03-08: 02:00 EST becomes 03:00 EDT.
		{"spring forward night is an hour shorter", night, at("2026-03-07 21:00:00", ny), nil, true, 10 * time.Hour},
		{"spring forward, after the change", night, at("2026-03-08 03:00:00", ny), nil, true, 5 * time.Hour},
		{"spring forward range holding the change", early, at("2026-03-08 01:30:00", ny), nil, true, 30 * time.Minute},
		{"spring forward, 03:00 is past the range", early, at("2026-03-08 03:00:00", ny), nil, false, 0},
		// Fall back, Sunday 2026-11-01: 02:00 EDT becomes 01:00 EST.
		{"fall back night is an hour longer", night, at("2026-10-31 21:00:00", ny), nil, true, 12 * time.Hour},
		{"fall back, after the change", night, at("2026-11-01 01:30:00", ny).Add(time.Hour), nil, true, 6*time.Hour + 30*time.Minute},
		// 01:30 EDT; the range ends at 03:00 EST, an hour later than the wall
		// clock's 1h30m.
		{"fall back range holding the change", early, at("2026-11-01 00:30:00", ny).Add(time.Hour), nil, true, 2*time.Hour + 30*time.Minute},
		{"fall back, the second 01:30", early, at("2026-11-01 00:30:00", ny).Add(2 * time.Hour), nil, true, 90 * time.Minute},

		// Days: a range belongs to the day it starts on. 2026-06-12 is a
		// Friday.
		{"friday night is quiet", weeknights, at("2026-06-12 23:00:00", ny), nil, true, 9 * time.Hour},
		{"saturday morning ends friday's range", weeknights, at("2026-06-13 07:00:00", ny), nil, true, time.Hour},
		{"saturday night is not quiet", weeknights, at("2026-06-13 23:00:00", ny), nil, false, 0},
		{"monday morning is not quiet", weeknights, at("2026-06-15 07:00:00", ny), nil, false, 0},
		{"monday night is quiet", weeknights, at("2026-06-15 21:00:00", ny), nil, true, 11 * time.Hour},
		{"weekend morning", weekend, at("2026-06-14 11:00:00", time.UTC), nil, true, time.Hour},
		{"weekday morning", weekend, at("2026-06-15 11:00:00", time.UTC), nil, false, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			until, quiet := c.q.Until(c.t, c.zone)
			if quiet != c.quiet || until != c.until {
				t.Errorf("Until(%s) = %s, %v; want %s, %v", c.t, until, quiet, c.until, c.quiet)
			}
		})
	}
}

func TestParseQuiet(t *testing.T) {
	for _, c := range []struct {
		span string
		days []string
		want string // String(nil), or the error's start
	}{
		{"21:00-08:00", nil, "quiet 21:00-08:00 UTC"},
		{"08:00-21:00", []string{"mon-fri"}, "quiet 08:00-21:00 mon tue wed thu fri UTC"},
		{"00:00-23:59", []string{"sat", "sun"}, "quiet 00:00-23:59 sat sun UTC"},
		{"22:00-06:00", []string{"fri-mon"}, "quiet 22:00-06:00 mon fri sat sun UTC"},
		{"22:00-06:00", []string{"mon-sun"}, "quiet 22:00-06:00 UTC"},
		{"8:00-21:00", nil, `quiet range "8:00-21:00": "8:00" is not HH:MM`},
		{"08:00-24:00", nil, `quiet range "08:00-24:00": "24:00" is not a time`},
		{"08:60-21:00", nil, `quiet range "08:60-21:00": "08:60" is not a time`},
		{"08:00", nil, `quiet range "08:00" is not HH:MM-HH:MM`},
		{"08:00-08:00", nil, `quiet range "08:00-08:00" is empty`},
		{"08:00-21:00", []string{"monday"}, `unknown day "monday"`},
		{"08:00-21:00", []string{"mon-fry"}, `unknown day "fry"`},
	} {
		q, err := limiter.ParseQuiet(c.span, c.days)
		got := ""
		if err != nil {
			got = err.Error()
		} else {
			got = q.String(nil)
		}
		if !strings.HasPrefix(got, c.want) {
			t.Errorf("ParseQuiet(%q, %q) = %q, want %q", c.span, c.days, got, c.want)
		}
	}
}

func TestQuietLength(t *testing.T) {
	if got := mustQuiet(t, "21:00-08:00").Length(); got != 11*time.Hour {
		t.Errorf("21:00-08:00 is %s long", got)
	}
	if got := mustQuiet(t, "12:00-13:30").Length(); got != 90*time.Minute {
		t.Errorf("12:00-13:30 is %s long", got)
	}
}

func mustQuiet(t *testing.T, span string, days ...string) limiter.Quiet {
	t.Helper()
	q, err := limiter.ParseQuiet(span, days)
	if err != nil {
		t.Fatal(err)
	}
	return q
}

// A quiet rule counts nothing: it validates without a limit or a window,
// and without dimensions; what it has is still checked.
func TestQuietRuleValidate(t *testing.T) {
	q, err := limiter.ParseQuiet("22:00-07:00", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []limiter.Rule{
		{Name: "night", Quiet: &q},
		{Name: "night", By: []string{"recipient"}, Quiet: &q},
	} {
		if err := r.Validate(); err != nil {
			t.Errorf("%+v: %v", r, err)
		}
	}
	for _, r := range []limiter.Rule{
		{Name: "", Quiet: &q},
		{Name: "9night", Quiet: &q},
		{Name: "night", By: []string{"recipient", "recipient"}, Quiet: &q},
		{Name: "night", By: []string{"bad name"}, Quiet: &q},
		{Name: "night", By: []string{"recipient"}}, // not quiet: needs a window
	} {
		if err := r.Validate(); err == nil {
			t.Errorf("%+v validated", r)
		}
	}
}
