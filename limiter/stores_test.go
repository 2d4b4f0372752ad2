package limiter

import (
	"context"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// storeKinds runs a test once per store: the memory store, and the Redis
// store on a real redis-server deciding in Go (its default) and in the
// script (as on a cluster, and after a conflict). clock is the store's own clock (for Refund);
// requests carry their own Now.
func storeKinds(t *testing.T, f func(t *testing.T, newStore func(clock func() time.Time) Store)) {
	t.Run("memory", func(t *testing.T) {
		f(t, func(clock func() time.Time) Store {
			m := NewMemory(MemoryOptions{Now: clock, SweepInterval: -1})
			t.Cleanup(func() { m.Close() })
			return m
		})
	})
	for _, scriptOnly := range []bool{false, true} {
		name := "redis"
		if scriptOnly {
			name = "redis-script"
		}
		t.Run(name, func(t *testing.T) {
			client := redistest.Client(t)
			f(t, func(clock func() time.Time) Store {
				s := NewRedis(client, RedisOptions{Now: clock, Timeout: 2 * time.Second, ScriptOnly: scriptOnly, GoBatchMin: 1})
				t.Cleanup(func() { s.Close() })
				return s
			})
		})
	}
}

// fixedClock is a settable clock for a test.
type fixedClock struct{ t time.Time }

func (c *fixedClock) now() time.Time { return c.t }

// seedRules is the seed config (see the README).
func seedRules() []*Rule {
	return []*Rule{
		{Name: "recipient_minute", By: []string{"recipient"}, Limit: 15, Window: Window{Duration: time.Minute}},
		{Name: "recipient_day", By: []string{"recipient"}, Limit: 50, Window: Window{Duration: 24 * time.Hour}},
		{Name: "same_content_59s", By: []string{"recipient", "content"}, Limit: 2, Window: Window{Duration: 59 * time.Second}},
		{Name: "same_content_59m", By: []string{"recipient", "content"}, Limit: 5, Window: Window{Duration: 59 * time.Minute}},
	}
}

// vals maps dimension names to values.
type vals map[string]string

// req builds a request for the rules with the values and cost 1.
func req(now time.Time, v vals, rules ...*Rule) *Request {
	r := &Request{Now: now}
	for _, rule := range rules {
		c := Check{Rule: rule, Cost: 1}
		for _, d := range rule.By {
			c.Values = append(c.Values, v[d])
		}
		r.Checks = append(r.Checks, c)
	}
	return r
}

func mustDecide(t *testing.T, s Store, r *Request) *Decision {
	t.Helper()
	d, err := s.Decide(context.Background(), r)
	if err != nil {
		t.Fatalf("decide: %v", err)
	}
	return d
}

func mustUsage(t *testing.T, s Store, r *Request) *Decision {
	t.Helper()
	d, err := s.Usage(context.Background(), r)
	if err != nil {
		t.Fatalf("usage: %v", err)
	}
	return d
}

func mustParse(t *testing.T, s string) time.Time {
	t.Helper()
	v, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func mustZone(t *testing.T, name string) *time.Location {
	t.Helper()
	z, err := time.LoadLocation(name)
	if err != nil {
		t.Fatal(err)
	}
	return z
}
