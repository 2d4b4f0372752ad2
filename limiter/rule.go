package limiter

import (
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
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

// Retention is how far back a log must reach for this window: the window
// itself, or the longest a calendar period can be in any zone (a day is 25 h
// on a fall-back day, and a period may have begun up to that long ago).
func (w Window) Retention() time.Duration {
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
	// Lease, when positive, is the block size of a leased budget: a
	// gateway takes this many units of the rule's budget from the store
	// at a time and admits from them without asking it, giving back what
	// it did not spend (package limiter/lease serves such rules, and
	// CheckLease says which rules may be leased; a store used directly
	// ignores it). Default 0: every decision asks the store.
	Lease int64
}

// namePattern is what may name a rule, a dimension or a handler.
var namePattern = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_.-]{0,63}$`)

// ValidDimensionName reports whether s may name a dimension (see
// CheckName).
func ValidDimensionName(s string) bool { return namePattern.MatchString(s) }

// CheckName checks a name of a rule, a dimension or a handler: a letter or
// underscore, then letters, digits, '_', '.', '-'; at most 64 bytes. Names
// end up in keys, metrics and headers, so they are kept to characters that
// need no escaping. The error starts with the name quoted, for the caller
// to say what it names ("rule %w").
func CheckName(s string) error {
	if namePattern.MatchString(s) {
		return nil
	}
	return fmt.Errorf("%q: invalid name (a letter or '_', then letters, digits, '_', '.', '-'; at most 64 bytes)", s)
}

// CheckDimensions checks a rule's dimension list (By): at least one, each a
// valid name, none twice.
func CheckDimensions(by []string) error {
	if len(by) == 0 {
		return errors.New("no dimensions (by)")
	}
	for i, d := range by {
		if err := CheckName(d); err != nil {
			return fmt.Errorf("dimension %w", err)
		}
		if slices.Contains(by[:i], d) {
			return fmt.Errorf("dimension %s listed twice", d)
		}
	}
	return nil
}

// CheckPrefix checks a key prefix: no braces, since a brace would make the
// prefix the Redis Cluster hash tag of every key (all recipients on one
// shard). The error starts with the prefix quoted, for the caller to say
// what it is ("key_prefix %w").
func CheckPrefix(prefix string) error {
	if strings.ContainsAny(prefix, "{}") {
		return fmt.Errorf("%q must not contain { or }: the first dimension's value is the Redis Cluster hash tag", prefix)
	}
	return nil
}

// Validate checks a window: rolling (from 1ms to 180 days) or calendar,
// not both.
func (w Window) Validate() error {
	if w.IsCalendar() {
		if w.Duration != 0 {
			return errors.New("window and calendar exclude each other")
		}
		if w.Unit > Month {
			return errors.New("unknown calendar unit")
		}
		return nil
	}
	if w.Duration < time.Millisecond {
		return fmt.Errorf("window %s is shorter than 1ms", w.Duration)
	}
	// Records are kept to the millisecond, so a window is a whole number
	// of them; one that is not is most likely a unit mistake.
	if w.Duration%time.Millisecond != 0 {
		return fmt.Errorf("window %s is not a whole number of milliseconds, the unit records are kept in", w.Duration)
	}
	if w.Duration > maxRollingWindow {
		return fmt.Errorf("window %s is longer than %s", w.Duration, maxRollingWindow)
	}
	return nil
}

// Validate checks a rule's own fields: its name, dimensions, limit and
// window; a quiet rule only its name and dimensions, which may be none.
// Errors name the rule.
func (r *Rule) Validate() error {
	if r.Name == "" {
		return errors.New("rule has no name")
	}
	if err := CheckName(r.Name); err != nil {
		return fmt.Errorf("rule %w", err)
	}
	if r.Quiet != nil {
		// A quiet rule counts nothing: no limit or window, and it may
		// apply to every request (no dimensions).
		if len(r.By) == 0 {
			return nil
		}
		if err := CheckDimensions(r.By); err != nil {
			return fmt.Errorf("rule %s: %w", r.Name, err)
		}
		return nil
	}
	if err := CheckDimensions(r.By); err != nil {
		return fmt.Errorf("rule %s: %w", r.Name, err)
	}
	if r.Limit < 0 || r.Limit > MaxLimit {
		return fmt.Errorf("rule %s: limit %d is outside 0..%d", r.Name, r.Limit, MaxLimit)
	}
	if err := r.Window.Validate(); err != nil {
		return fmt.Errorf("rule %s: %w", r.Name, err)
	}
	if err := r.CheckLease(); err != nil {
		return fmt.Errorf("rule %s: %w", r.Name, err)
	}
	return nil
}

// CheckLease checks what leasing needs of a rule with Lease set (nil
// without): a limit above BucketThreshold, so that its log is bucketed and
// a block's unspent part can be given back alone; a block of at most a
// tenth of the limit, so that the gateways' unspent blocks leave most of
// it to spend; and a rolling window from 1 minute to 178 days, because a
// leased window is counted a hundredth longer (see limiter/lease) and
// must stay within 180 days.
func (r *Rule) CheckLease() error {
	switch {
	case r.Lease == 0:
		return nil
	case r.Lease < 0:
		return fmt.Errorf("lease %d is negative", r.Lease)
	case r.Limit <= BucketThreshold:
		return fmt.Errorf("lease needs a limit above %d, not %d: a smaller budget is cheap to decide in the store", BucketThreshold, r.Limit)
	case r.Lease > r.Limit/10:
		return fmt.Errorf("lease %d is more than a tenth of the limit %d: the gateways' unspent blocks would hold back too much of it", r.Lease, r.Limit)
	case !r.Window.IsCalendar() && (r.Window.Duration < time.Minute || r.Window.Duration > maxLeasedWindow):
		return fmt.Errorf("lease needs a window from 1m to 178 days, not %s (a longer budget is a calendar rule)", r.Window.Duration)
	}
	return nil
}

// maxLeasedWindow is the longest rolling window a lease serves: counted a
// hundredth longer, it stays within maxRollingWindow.
const maxLeasedWindow = 178 * 24 * time.Hour

// maxRollingWindow keeps logs bounded (and their retention within the
// three bytes the Redis encoding gives it): a longer budget is better
// expressed as a calendar rule.
const maxRollingWindow = 180 * 24 * time.Hour
