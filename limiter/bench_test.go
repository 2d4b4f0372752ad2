package limiter

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// benchRequests prepares n seed-config requests over distinct recipients
// and a few contents each, so a benchmark measures decisions, not building.
func benchRequests(n int) []*Request {
	rules := seedRules()
	out := make([]*Request, n)
	for i := range out {
		out[i] = req(time.Time{}, vals{
			"recipient": "user" + strconv.Itoa(i%100_000),
			"content":   "content-" + strconv.Itoa(i%5),
		}, rules...)
	}
	return out
}

// BenchmarkMemoryDecide is one decision of the seed config (4 rules, 2 logs)
// in the memory store, over 100k recipients.
func BenchmarkMemoryDecide(b *testing.B) {
	m := NewMemory(MemoryOptions{})
	defer m.Close()
	reqs := benchRequests(1 << 16)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	i := 0
	for b.Loop() {
		if _, err := m.Decide(ctx, reqs[i&(len(reqs)-1)]); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

// BenchmarkMemoryDecideParallel is the same from every core at once.
func BenchmarkMemoryDecideParallel(b *testing.B) {
	m := NewMemory(MemoryOptions{})
	defer m.Close()
	reqs := benchRequests(1 << 16)
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer() // the requests' set-up is not a decision
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			if _, err := m.Decide(ctx, reqs[i&(len(reqs)-1)]); err != nil {
				b.Error(err)
				return
			}
			i += 7
		}
	})
}

// BenchmarkRedisDecide is one decision of the seed config on a real
// redis-server, from 32 concurrent callers. It reports the batches whose
// write from Go found a key changed, per decision.
func BenchmarkRedisDecide(b *testing.B) {
	c := redistest.Client(b)
	s := NewRedis(c, RedisOptions{Timeout: 5 * time.Second})
	defer s.Close()
	reqs := benchRequests(1 << 16)
	ctx := context.Background()
	var callers atomic.Int64
	b.ReportAllocs()
	b.ResetTimer()       // nor is starting redis-server
	b.SetParallelism(16) // 32 callers on 2 cores
	b.RunParallel(func(pb *testing.PB) {
		// Callers start apart: from one start, all 32 would send the same
		// recipient at once, and their batches would conflict.
		i := int(callers.Add(1)) * 2039
		for pb.Next() {
			if _, err := s.Decide(ctx, reqs[i&(len(reqs)-1)]); err != nil {
				b.Error(err)
				return
			}
			i += 13
		}
	})
	b.ReportMetric(float64(s.Conflicts())/float64(b.N), "conflicts/op")
}
