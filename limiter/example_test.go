package limiter_test

import (
	"context"
	"fmt"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/memstore"
)

// Three sends to one recipient within a minute, under a cap of two a
// minute: the third is denied until the first leaves the window.
func Example() {
	store := memstore.New(memstore.Options{SweepInterval: -1})
	defer store.Close()
	rule := &limiter.Rule{
		Name:   "recipient_minute",
		By:     []string{"recipient"},
		Limit:  2,
		Window: limiter.Window{Duration: time.Minute},
	}
	t0 := time.Date(2026, 5, 1, 10, 0, 0, 0, time.UTC)
	for _, at := range []time.Duration{0, 10 * time.Second, 20 * time.Second} {
		d, err := store.Decide(context.Background(), &limiter.Request{
			Checks: []limiter.Check{{Rule: rule, Values: []string{"+8613800000000"}, Cost: 1}},
			Now:    t0.Add(at),
		})
		if err != nil {
			fmt.Println(err)
			return
		}
		if d.Allowed {
			fmt.Printf("at %s: admitted, %d remaining\n", at, d.Results[0].Remaining)
		} else {
			fmt.Printf("at %s: denied by %s, retry after %s\n", at, d.Results[d.Denier].Rule.Name, d.RetryAfter)
		}
	}
	// Output:
	// at 0s: admitted, 1 remaining
	// at 10s: admitted, 0 remaining
	// at 20s: denied by recipient_minute, retry after 40s
}
