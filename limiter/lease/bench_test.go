package lease

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/memstore"
)

// BenchmarkStoreCalls decides the traffic (a recipient's cap
// beside the campaign's coupon budget) with and without leasing, and
// reports the inner store's decisions a request and the coupon key's
// share of them: without a lease every request writes the coupon key;
// with one only a block in 1,000 does.
func BenchmarkStoreCalls(b *testing.B) {
	for _, block := range []int64{0, 100, 1000} {
		b.Run(fmt.Sprintf("lease=%d", block), func(b *testing.B) {
			m := memstore.New(memstore.Options{})
			defer m.Close()
			inner := &countingKeys{counting: counting{Store: m}}
			var s limiter.Store = inner
			if block > 0 {
				s = New(inner, Options{Term: time.Minute})
			}
			defer s.Close()
			rule := coupons(block)
			rule.Limit = limiter.MaxLimit
			ctx := context.Background()
			b.ResetTimer()
			for i := range b.N {
				r := req(check(rule, "spring"), check(perRecipient, fmt.Sprint(i)))
				if _, err := s.Decide(ctx, r); err != nil {
					b.Fatal(err)
				}
			}
			b.StopTimer()
			b.ReportMetric(float64(inner.decides.Load())/float64(b.N), "decides/op")
			b.ReportMetric(float64(inner.coupon.Load())/float64(b.N), "coupon-writes/op")
		})
	}
}

// countingKeys also counts the decisions that touch the coupon budget.
type countingKeys struct {
	counting
	coupon atomic.Int64
}

func (c *countingKeys) Decide(ctx context.Context, req *limiter.Request) (*limiter.Decision, error) {
	for _, ch := range req.Checks {
		if ch.Rule.Name == "coupons" {
			c.coupon.Add(1)
			break
		}
	}
	return c.counting.Decide(ctx, req)
}
