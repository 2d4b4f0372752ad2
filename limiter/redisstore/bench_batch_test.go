package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// redisClientOf returns the go-redis client of a Redis store.
func redisClientOf(s limiter.Store) (*redis.Client, bool) {
	r, ok := s.(*Store)
	if !ok {
		return nil, false
	}
	c, ok := r.client.(*redis.Client)
	return c, ok
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
		keys   limitertest.KeysBefore
		script bool
	}{
		{"callers=1/cpu/keys=made", 1, limitertest.KeysMade, false},
		{"callers=4/cpu/keys=made", 4, limitertest.KeysMade, false},
		{"callers=1/cpu/keys=new", 1, limitertest.KeysNew, false},
		{"callers=1/cpu/keys=made/script", 1, limitertest.KeysMade, true},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := redistest.Client(b)
			s := New(c, Options{Timeout: 5 * time.Second, ScriptOnly: bc.script})
			defer s.Close()
			rc, _ := redisClientOf(s)
			limitertest.DecideBatches(b, s, bc.perCPU, bc.keys, rc)
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
	s := New(c, Options{Timeout: 5 * time.Second})
	defer s.Close()
	limitertest.Warm(b, s, limitertest.SeedStreams(1))
	ctx := context.Background()
	keys, err := c.Keys(ctx, "*").Result()
	if err != nil || len(keys) < limitertest.BatchEntries {
		b.Fatalf("%d keys after the warm-up, %v", len(keys), err)
	}
	cpu := redistest.CPUSeconds(b, c)
	b.ResetTimer()
	next := 0
	for b.Loop() {
		if next+limitertest.BatchEntries > len(keys) {
			next = 0
		}
		batch := keys[next : next+limitertest.BatchEntries]
		next += limitertest.BatchEntries
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
	b.ReportMetric((redistest.CPUSeconds(b, c)-cpu)*1e6/(float64(b.N)*limitertest.BatchEntries), "redis-µs/entry")
}
