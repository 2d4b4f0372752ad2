package memstore

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// BenchmarkMemoryDecideBatch is one batch send of 500 entries of the seed
// config in the memory store, all admitted.
func BenchmarkMemoryDecideBatch(b *testing.B) {
	s := New(Options{})
	defer s.Close()
	limitertest.DecideBatches(b, s, 1, limitertest.KeysAsTheyCome, nil)
}

// BenchmarkMemoryDecide is one decision of the seed config (4 rules, 2 logs)
// in the memory store, over 65,536 recipients: an admission.
func BenchmarkMemoryDecide(b *testing.B) {
	m := New(Options{SweepInterval: -1}) // the sweeper runs on the wall clock, not the simulated one
	defer m.Close()
	limitertest.DecideInTurn(b, m)
}

// BenchmarkMemoryDecideParallel is the same from every core at once.
func BenchmarkMemoryDecideParallel(b *testing.B) {
	m := New(Options{SweepInterval: -1})
	defer m.Close()
	streams := limitertest.SeedStreams(runtime.GOMAXPROCS(0)) // one a goroutine
	var next atomic.Int64
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer() // the requests' set-up is not a decision
	b.RunParallel(func(pb *testing.PB) {
		s := streams[next.Add(1)-1]
		for pb.Next() {
			if d, err := m.Decide(ctx, s.Next()); !limitertest.Admitted(b, d, err) {
				return
			}
		}
	})
}

// BenchmarkMemoryDecideRepeats is the memory store's other case: each
// recipient gets one message again and again, on the wall clock, and
// after two in 59 s the seed config denies it. Denials decode the key and
// write nothing back.
func BenchmarkMemoryDecideRepeats(b *testing.B) {
	m := New(Options{})
	defer m.Close()
	rules := limitertest.SeedRules()
	reqs := make([]*limiter.Request, limitertest.SeedStreamRecipients)
	for i := range reqs {
		reqs[i] = limitertest.Req(time.Time{}, limitertest.Vals{"recipient": "user" + strconv.Itoa(i), "content": "content-" + strconv.Itoa(i%5)}, rules...)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	i, denied := 0, 0
	for b.Loop() {
		d, err := m.Decide(ctx, reqs[i&(len(reqs)-1)])
		if err != nil {
			b.Fatal(err)
		}
		if !d.Allowed {
			denied++
		}
		i++
	}
	b.ReportMetric(float64(denied)/float64(b.N), "denied/op")
}
