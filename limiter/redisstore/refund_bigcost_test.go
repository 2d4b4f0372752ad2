package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// TestRefundOfCostsPastABucket proves that admissions whose costs pass
// what one bucket entry holds (2^32−1: the next starts an entry of its own
// in the same bucket) are each refunded exactly, in any order: a probe
// sending 4 at once of cost 2^30 or 2^31 and refunding 3 found some of the
// refunds taken and the units still counted.
func TestRefundOfCostsPastABucket(t *testing.T) {
	for _, cost := range []int64{1 << 30, 1 << 31, 1<<32 - 1} {
		for _, order := range [][]int{{1, 2, 3}, {3, 2, 1}, {0, 2, 3}, {2, 0, 1}} {
			storeKinds(t, func(t *testing.T, newStore func(func() time.Time) limiter.Store) {
				clock := &limitertest.FixedClock{T: limitertest.MustParse(t, "2026-03-07T12:00:00Z")}
				s := newStore(clock.Now)
				ctx := context.Background()
				rule := &limiter.Rule{Name: "budget", By: []string{"user"}, Limit: 1 << 40, Window: limiter.Window{Duration: time.Hour}}
				req := func() *limiter.Request {
					r := limitertest.Req(clock.T, limitertest.Vals{"user": "u"}, rule)
					r.Checks[0].Cost = cost
					return r
				}
				var ids []string
				for range 4 {
					d := limitertest.MustDecide(t, s, req())
					if !d.Allowed {
						t.Fatalf("cost %d denied", cost)
					}
					ids = append(ids, d.ID())
					clock.T = clock.T.Add(time.Millisecond)
				}
				for _, i := range order {
					if ok, err := s.Refund(ctx, ids[i]); !ok || err != nil {
						t.Errorf("cost %d, order %v: refund of admission %d: %v %v", cost, order, i, ok, err)
					}
				}
				if u := limitertest.MustUsage(t, s, req()); u.Results[0].Used != cost {
					t.Errorf("cost %d, order %v: %d used after 3 of 4 refunded; want %d", cost, order, u.Results[0].Used, cost)
				}
			})
		}
	}
}
