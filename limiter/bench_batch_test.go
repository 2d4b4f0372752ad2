package limiter

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// batchEntries is the size of the benchmarks' batch sends: the issue's
// 500-recipient Expo batch.
const batchEntries = 500

// nextBatch fills reqs with the stream's next len(reqs) requests, each with
// values of its own (a stream reuses its one Request). Each request's checks
// and values are allocated on the first batch and filled in again for the
// next ones: building the requests is the caller's work, not the store's,
// and allocating them anew for every batch (five allocations an entry) was
// a fifth of the time this benchmark measured.
func (s *seedStream) nextBatch(reqs []Request) {
	for i := range reqs {
		r := s.next()
		q := &reqs[i]
		if len(q.Checks) != len(r.Checks) {
			q.Checks = make([]Check, len(r.Checks))
		}
		for k, c := range r.Checks {
			c.Values = append(q.Checks[k].Values[:0], c.Values...)
			q.Checks[k] = c
		}
		q.Now = r.Now
	}
}

// decideBatches decides b.N batches of batchEntries from perCPU callers a
// CPU (one stream each), checking that every entry is admitted, and
// reports entries/s and the time per entry.
func decideBatches(b *testing.B, s Store, perCPU int) {
	streams := seedStreams(perCPU * runtime.GOMAXPROCS(0))
	var next atomic.Int64
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.SetParallelism(perCPU)
	b.RunParallel(func(pb *testing.PB) {
		st := streams[next.Add(1)-1]
		reqs := make([]Request, batchEntries)
		for pb.Next() {
			st.nextBatch(reqs)
			ds, err := s.DecideBatch(ctx, reqs, BatchAll)
			if err != nil {
				b.Error(err)
				return
			}
			for _, d := range ds {
				if !admitted(b, d, nil) {
					return
				}
			}
		}
	})
	b.StopTimer()
	entries := float64(b.N) * batchEntries
	b.ReportMetric(entries/time.Since(start).Seconds(), "entries/s")
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/entries, "ns/entry")
}

// BenchmarkMemoryDecideBatch is one batch send of 500 entries of the seed
// config in the memory store, all admitted.
func BenchmarkMemoryDecideBatch(b *testing.B) {
	s := NewMemory(MemoryOptions{})
	defer s.Close()
	decideBatches(b, s, 1)
}

// BenchmarkRedisDecideBatch is one batch send of 500 entries of the seed
// config on a real redis-server (one script run, one round trip), from
// one caller a CPU and from four. redis-µs/entry is the server's CPU an entry
// (with REDIS_URL, only this benchmark should use that server); the single
// send's figure is BenchmarkRedisDecideOneCaller's redis-µs/op.
func BenchmarkRedisDecideBatch(b *testing.B) {
	for _, bc := range []struct {
		name   string
		perCPU int
	}{{"callers=1/cpu", 1}, {"callers=4/cpu", 4}} {
		b.Run(bc.name, func(b *testing.B) {
			c := redistest.Client(b)
			s := NewRedis(c, RedisOptions{Timeout: 5 * time.Second})
			defer s.Close()
			cpu := redistest.CPUSeconds(b, c)
			decideBatches(b, s, bc.perCPU)
			b.ReportMetric((redistest.CPUSeconds(b, c)-cpu)*1e6/(float64(b.N)*batchEntries), "redis-µs/entry")
		})
	}
}
