package limiter

import (
	"fmt"
	"regexp"
	"time"
)

// Unit is the period of a calendar window.
type Unit uint8

// Calendar units. The zero Unit means the window is rolling.
const (
	Rolling Unit = iota
	Day
	Week // starts on Monday
	Month
)

// String returns "day", "week", "month", or "rolling".
func (u Unit) String() string {
	switch u {
	case Day:
		return "day"
	case Week:
		return "week"
	case Month:
		return "month"
	}
	return "rolling"
}

// ParseUnit parses "day", "week" or "month".
func ParseUnit(s string) (Unit, error) {
	switch s {
	case "day":
		return Day, nil
	case "week":
		return Week, nil
	case "month":
		return Month, nil
	}
	return Rolling, fmt.Errorf("unknown calendar unit %q (want day, week or month)", s)
}

// Window is either rolling (Duration > 0: the count over (now-Duration, now],
// millisecond precision, a record exactly Duration old is outside) or calendar
// (Unit != Rolling: the count since the start of the current day, week or
// month in Zone, DST-correct).
type Window struct {
	Duration time.Duration
	Unit     Unit
	// Zone is the default zone of a calendar window; nil means UTC. A request
	// may name another zone for its recipient (Check.Zone).
	Zone *time.Location
}

// IsCalendar reports whether w is a calendar window.
func (w Window) IsCalendar() bool { return w.Unit != Rolling }

// Seconds is the nominal length of the window in seconds, as the
// RateLimit-Policy header's w parameter wants it.
func (w Window) Seconds() int64 {
	switch w.Unit {
	case Day:
		return 86400
	case Week:
		return 7 * 86400
	case Month:
		return 30 * 86400
	}
	return int64((w.Duration + time.Second - 1) / time.Second)
}

// String is the window as a user wrote it: "1m0s", "calendar day Asia/Shanghai".
func (w Window) String() string {
	if !w.IsCalendar() {
		return w.Duration.String()
	}
	return "calendar " + w.Unit.String() + " " + w.zone().String()
}

func (w Window) zone() *time.Location {
	if w.Zone == nil {
		return time.UTC
	}
	return w.Zone
}

// retention is how far back a log must reach for this window: the window
// itself, or the longest a calendar period can be in any zone (a day is 25 h
// on a fall-back day, and a period may have begun up to that long ago).
func (w Window) retention() time.Duration {
	switch w.Unit {
	case Day:
		return 26 * time.Hour
	case Week:
		return 7*24*time.Hour + 2*time.Hour
	case Month:
		return 31*24*time.Hour + 2*time.Hour
	}
	return w.Duration
}

// Rule is one cap: at most Limit units per Window for each distinct tuple of
// the values of the dimensions By.
type Rule struct {
	// Name identifies the rule in answers, metrics and the admin API.
	Name string
	// By lists the dimensions, in order. The first one's value is the Redis
	// Cluster hash tag: every rule with the same first dimension value is
	// decided in one round trip.
	By []string
	// Limit is the most units admitted per window.
	Limit int64
	// Window is the counting window.
	Window Window
	// Weight names what a request's cost measures, when it is not one
	// request (for example the placeholder "{json.amount}"). Rules over the
	// same dimensions and the same Weight share one record log; "" counts
	// requests.
	Weight string
	// Quiet, when set, makes this a quiet rule: it denies every request in
	// the quiet range and counts nothing, so its caller decides it (see
	// Quiet.Until) and no store ever sees it; Limit, Window and Weight are
	// unused, and By may be empty.
	Quiet *Quiet
}

var dimensionName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,63}$`)

// ValidDimensionName reports whether s may name a dimension: a letter or
// underscore, then letters, digits, '_', '.', '-'; at most 64 bytes. Names
// end up in keys, so they are kept to characters that need no escaping.
func ValidDimensionName(s string) bool { return dimensionName.MatchString(s) }

// Validate checks a rule's own fields.
func (r *Rule) Validate() error {
	if r.Name == "" {
		return fmt.Errorf("rule has no name")
	}
	if len(r.By) == 0 {
		return fmt.Errorf("rule %s: no dimensions (by)", r.Name)
	}
	seen := map[string]bool{}
	for _, d := range r.By {
		if !ValidDimensionName(d) {
			return fmt.Errorf("rule %s: invalid dimension name %q", r.Name, d)
		}
		if seen[d] {
			return fmt.Errorf("rule %s: dimension %s listed twice", r.Name, d)
		}
		seen[d] = true
	}
	if r.Limit < 0 {
		return fmt.Errorf("rule %s: limit %d is negative", r.Name, r.Limit)
	}
	if r.Window.IsCalendar() {
		if r.Window.Duration != 0 {
			return fmt.Errorf("rule %s: both a rolling window and a calendar period", r.Name)
		}
		if r.Window.Unit > Month {
			return fmt.Errorf("rule %s: unknown calendar unit", r.Name)
		}
	} else {
		if r.Window.Duration < time.Millisecond {
			return fmt.Errorf("rule %s: window %s is shorter than 1ms", r.Name, r.Window.Duration)
		}
		if r.Window.Duration > maxRollingWindow {
			return fmt.Errorf("rule %s: window %s is longer than %s", r.Name, r.Window.Duration, maxRollingWindow)
		}
	}
	return nil
}

// maxRollingWindow keeps logs bounded (and their retention within the
// three bytes the Redis encoding gives it): a longer budget is better
// expressed as a calendar rule.
const maxRollingWindow = 180 * 24 * time.Hour
