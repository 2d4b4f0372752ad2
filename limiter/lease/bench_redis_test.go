package lease

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
	"github.com/freqcap/caddy-freqcap/limiter/redisstore"
)

// BenchmarkRedisCPU decides the seed config (four caps per recipient) for
// distinct recipients on a standalone Redis, alone and beside the issue's
// coupon budget (233,300 a day on one key), unleased and leased, from
// parallel callers, and reports the Redis server's CPU a decision
// (redis-µs/op, from INFO cpu). The coupon key holds a busy day's
// bucketed log, which an unleased decision rewrites whole; leased, one
// decision in a block does.
func BenchmarkRedisCPU(b *testing.B) {
	for _, tc := range []struct {
		name  string
		lease int64 // -1: no coupon rule
	}{{"seed", -1}, {"seed+coupons", 0}, {"seed+coupons/lease=1000", 1000}} {
		b.Run(tc.name, func(b *testing.B) {
			client := redistest.Client(b)
			inner := redisstore.New(client, redisstore.Options{Timeout: 5 * time.Second})
			var s limiter.Store = inner
			if tc.lease > 0 {
				s = New(inner, Options{})
			}
			defer s.Close()
			rules := limitertest.SeedRules()
			if tc.lease >= 0 {
				rules = append(rules, coupons(tc.lease))
			}
			ctx := context.Background()
			if tc.lease >= 0 {
				// A busy day's coupon log: a bucket a minute for the
				// last day (1,440 of them), as the key holds.
				start := time.Now().Add(-24 * time.Hour)
				for m := range 1440 {
					r := req(check(coupons(0), "spring"))
					r.Now = start.Add(time.Duration(m) * time.Minute)
					if _, err := inner.Decide(ctx, r); err != nil {
						b.Fatal(err)
					}
				}
			}
			var next atomic.Int64
			cpu0 := redistest.CPUSeconds(b, client)
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				for pb.Next() {
					n := next.Add(1)
					v := limitertest.Vals{"recipient": fmt.Sprint("r", n), "content": "hello", "campaign": "spring"}
					if _, err := s.Decide(ctx, limitertest.Req(time.Time{}, v, rules...)); err != nil {
						b.Fatal(err)
					}
				}
			})
			b.StopTimer()
			b.ReportMetric((redistest.CPUSeconds(b, client)-cpu0)*1e6/float64(b.N), "redis-µs/op")
		})
	}
}
