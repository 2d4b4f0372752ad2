package limitertest

import (
	"context"
	"fmt"
	"reflect"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
)

func MustBatch(t *testing.T, s limiter.Store, reqs []limiter.Request, mode limiter.BatchMode) []*limiter.Decision {
	t.Helper()
	ds, err := s.DecideBatch(context.Background(), reqs, mode)
	if err != nil {
		t.Fatalf("decide batch: %v", err)
	}
	if len(ds) != len(reqs) {
		t.Fatalf("%d decisions for %d entries", len(ds), len(reqs))
	}
	return ds
}

func SameDecision(a, b *limiter.Decision) bool {
	if a.Allowed != b.Allowed || a.Denier != b.Denier || a.RetryAfter != b.RetryAfter || !a.Now.Equal(b.Now) {
		return false
	}
	return reflect.DeepEqual(a.Results, b.Results)
}

func Describe(d *limiter.Decision) string {
	s := fmt.Sprintf("allowed=%v denier=%d retry=%s:", d.Allowed, d.Denier, d.RetryAfter)
	for _, r := range d.Results {
		s += fmt.Sprintf(" [%s used=%d limit=%d rem=%d reset=%s denied=%v waived=%v retry=%s]", r.Rule.Name, r.Used, r.Limit, r.Remaining, r.Reset, r.Denied, r.Waived, r.RetryAfter)
	}
	return s
}

// FixedClock is a settable clock for a test.
type FixedClock struct{ T time.Time }

func (c *FixedClock) Now() time.Time { return c.T }

// SeedRules is the seed config (see the README).
func SeedRules() []*limiter.Rule {
	return []*limiter.Rule{
		{Name: "recipient_minute", By: []string{"recipient"}, Limit: 15, Window: limiter.Window{Duration: time.Minute}},
		{Name: "recipient_day", By: []string{"recipient"}, Limit: 50, Window: limiter.Window{Duration: 24 * time.Hour}},
		{Name: "same_content_59s", By: []string{"recipient", "content"}, Limit: 2, Window: limiter.Window{Duration: 59 * time.Second}},
		{Name: "same_content_59m", By: []string{"recipient", "content"}, Limit: 5, Window: limiter.Window{Duration: 59 * time.Minute}},
	}
}

// Vals maps dimension names to values.
type Vals map[string]string

// Req builds a request for the rules with the values and cost 1.
func Req(now time.Time, v Vals, rules ...*limiter.Rule) *limiter.Request {
	r := &limiter.Request{Now: now}
	for _, rule := range rules {
		c := limiter.Check{Rule: rule, Cost: 1}
		for _, d := range rule.By {
			c.Values = append(c.Values, v[d])
		}
		r.Checks = append(r.Checks, c)
	}
	return r
}

func MustDecide(t *testing.T, s limiter.Store, r *limiter.Request) *limiter.Decision {
	t.Helper()
	d, err := s.Decide(context.Background(), r)
	if err != nil {
		t.Fatalf("decide: %v", err)
	}
	return d
}

func MustUsage(t *testing.T, s limiter.Store, r *limiter.Request) *limiter.Decision {
	t.Helper()
	d, err := s.Usage(context.Background(), r)
	if err != nil {
		t.Fatalf("usage: %v", err)
	}
	return d
}

func MustParse(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func MustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	z, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return z
}
