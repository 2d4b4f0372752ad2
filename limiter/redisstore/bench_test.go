package redisstore

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// BenchmarkRedisDecide is one decision of the seed config on a real
// redis-server, from 32 concurrent callers, each with recipients of its
// own, each recipient's key made by a first round (see warm). It reports the batches whose write from Go found a key changed, per
// decision, and the server's CPU a decision (redis-µs/op; with REDIS_URL,
// only this benchmark should use that server).
func BenchmarkRedisDecide(b *testing.B) {
	c := redistest.Client(b)
	s := New(c, Options{Timeout: 5 * time.Second})
	defer s.Close()
	const parallelism = 16 // 32 callers on 2 cores
	streams := limitertest.SeedStreams(parallelism * runtime.GOMAXPROCS(0))
	limitertest.Warm(b, s, streams)
	cpu := redistest.CPUSeconds(b, c)
	var next atomic.Int64
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer() // nor is starting redis-server
	b.SetParallelism(parallelism)
	b.RunParallel(func(pb *testing.PB) {
		st := streams[next.Add(1)-1]
		for pb.Next() {
			if d, err := s.Decide(ctx, st.Next()); !limitertest.Admitted(b, d, err) {
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(s.Conflicts())/float64(b.N), "conflicts/op")
	b.ReportMetric((redistest.CPUSeconds(b, c)-cpu)*1e6/float64(b.N), "redis-µs/op")
}

// BenchmarkRedisDecideOneCaller is one decision at a time on a real
// redis-server: every batch holds one decision, as at a gateway's moderate
// load, so what a batch costs (its round trips, its go-redis pipelines)
// is paid by each decision whole. script is the default for a lone
// decision (one round trip, see GoBatchMin); go decides it in Go (two).
// redis-µs/op is the server's CPU a decision (with REDIS_URL, only this
// benchmark should use that server).
func BenchmarkRedisDecideOneCaller(b *testing.B) {
	for _, bc := range []struct {
		name       string
		goBatchMin int
	}{{"script", 0}, {"go", 1}} {
		b.Run(bc.name, func(b *testing.B) {
			c := redistest.Client(b)
			s := New(c, Options{Timeout: 5 * time.Second, GoBatchMin: bc.goBatchMin})
			defer s.Close()
			cpu := redistest.CPUSeconds(b, c)
			limitertest.DecideInTurn(b, s)
			b.StopTimer()
			b.ReportMetric((redistest.CPUSeconds(b, c)-cpu)*1e6/float64(b.N), "redis-µs/op")
		})
	}
}
