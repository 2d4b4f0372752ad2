package limiter

import (
	"context"
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

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

// keysBefore is what the keys of a benchmark's sends hold before them.
type keysBefore int

const (
	keysAsTheyCome keysBefore = iota // a first round creates them, later ones update them
	keysMade                         // made by a round before the timer (warm): every send updates
	keysNew                          // every send is a recipient's first: it creates its key
)

// decideBatches decides b.N batches of batchEntries from perCPU callers a
// CPU (one stream each), checking that every entry is admitted, and
// reports entries/s and the time per entry.
func decideBatches(b *testing.B, s Store, perCPU int, sends keysBefore) {
	streams := seedStreams(perCPU * runtime.GOMAXPROCS(0))
	switch sends {
	case keysMade:
		warm(b, s, streams)
	case keysNew:
		for _, st := range streams {
			st.firstSends = true
		}
	}
	var next atomic.Int64
	ctx := context.Background()
	rc, onRedis := redisClientOf(s)
	var cpu float64
	if onRedis {
		cpu = redistest.CPUSeconds(b, rc)
	}
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
	if onRedis {
		b.ReportMetric((redistest.CPUSeconds(b, rc)-cpu)*1e6/entries, "redis-µs/entry")
	}
}

// redisClientOf returns the go-redis client of a Redis store.
func redisClientOf(s Store) (*redis.Client, bool) {
	r, ok := s.(*Redis)
	if !ok {
		return nil, false
	}
	c, ok := r.client.(*redis.Client)
	return c, ok
}

// BenchmarkMemoryDecideBatch is one batch send of 500 entries of the seed
// config in the memory store, all admitted.
func BenchmarkMemoryDecideBatch(b *testing.B) {
	s := NewMemory(MemoryOptions{})
	defer s.Close()
	decideBatches(b, s, 1, keysAsTheyCome)
}

// BenchmarkRedisDecideBatch is one batch send of 500 entries of the seed
// config on a real redis-server (read in one round trip, decided in Go,
// written in a second), from one caller a CPU and from four, to
// recipients that have their key (keys=made, as BenchmarkRedisDecide's)
// and to recipients sent to for the first time (keys=new: each entry
// creates its key), and decided in freqcap.lua in one round trip
// (script, as ScriptOnly does). redis-µs/entry is the server's CPU an entry (with
// REDIS_URL, only this benchmark should use that server); the single
// send's figure is BenchmarkRedisDecide's redis-µs/op.
func BenchmarkRedisDecideBatch(b *testing.B) {
	for _, bc := range []struct {
		name   string
		perCPU int
		keys   keysBefore
		script bool
	}{
		{"callers=1/cpu/keys=made", 1, keysMade, false},
		{"callers=4/cpu/keys=made", 4, keysMade, false},
		{"callers=1/cpu/keys=new", 1, keysNew, false},
		{"callers=1/cpu/keys=made/script", 1, keysMade, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := redistest.Client(b)
			s := NewRedis(c, RedisOptions{Timeout: 5 * time.Second, ScriptOnly: bc.script})
			defer s.Close()
			decideBatches(b, s, bc.perCPU, bc.keys)
		})
	}
}

// BenchmarkRedisReadWriteFloor is the least a read-then-write batch can
// cost Redis: the keys BenchmarkRedisDecideBatch's keys=made sends update,
// 500 at a time read with MGET and written back with a pipelined SET ... PX
// each, with no decision, no check and no atomicity. Its redis-µs/entry,
// beside BenchmarkRedisDecideBatch's, is what the compare-and-set and the
// script around it add.
func BenchmarkRedisReadWriteFloor(b *testing.B) {
	c := redistest.Client(b)
	s := NewRedis(c, RedisOptions{Timeout: 5 * time.Second})
	defer s.Close()
	warm(b, s, seedStreams(1))
	ctx := context.Background()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil || len(keys) < batchEntries {
		b.Fatalf("%d keys after the warm-up, %v", len(keys), err)
	}
	cpu := redistest.CPUSeconds(b, c)
	b.ResetTimer()
	next := 0
	for b.Loop() {
		if next+batchEntries > len(keys) {
			next = 0
		}
		batch := keys[next : next+batchEntries]
		next += batchEntries
		vals, err := c.MGet(ctx, batch...).Result()
		if err != nil {
			b.Fatal(err)
		}
		if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, k := range batch {
				p.Set(ctx, k, vals[i], 24*time.Hour)
			}
			return nil
		}); err != nil {
			b.Fatal(err)
		}
	}
	b.StopTimer()
	b.ReportMetric((redistest.CPUSeconds(b, c)-cpu)*1e6/(float64(b.N)*batchEntries), "redis-µs/entry")
}
