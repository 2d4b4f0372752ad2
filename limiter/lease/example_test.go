package lease_test

import (
	"context"
	"fmt"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/lease"
	"github.com/freqcap/caddy-freqcap/limiter/memstore"
)

// A campaign's coupon budget, leased 1,000 units at a time: the first send
// takes a block, the next ones are admitted without the store, and Close
// gives back what was not spent.
func Example() {
	now := func() time.Time { return time.Date(2026, 3, 7, 12, 0, 0, 0, time.UTC) }
	inner := memstore.New(memstore.Options{Now: now}) // in practice the Redis store
	s := lease.New(inner, lease.Options{Now: now})
	defer s.Close()

	coupons := &limiter.Rule{Name: "coupons", By: []string{"campaign"}, Limit: 233_300,
		Window: limiter.Window{Unit: limiter.Day}, Lease: 1000}
	send := &limiter.Request{Checks: []limiter.Check{{Rule: coupons, Values: []string{"spring"}, Cost: 1}}}
	for range 3 {
		d, _ := s.Decide(context.Background(), send)
		fmt.Println(d.Allowed, d.Results[0].Used, d.Results[0].Remaining)
	}
	u, _ := inner.Usage(context.Background(), send)
	fmt.Println("the store counts", u.Results[0].Used)
	// Output:
	// true 1 233299
	// true 2 233298
	// true 3 233297
	// the store counts 1000
}
