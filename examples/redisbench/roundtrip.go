package main

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/lua"
)

// roundTrips prints what one round trip costs Redis, by what it carries,
// with one caller waiting for each answer before it sends the next, so
// Redis sleeps between round trips and each one pays its wake-up: the
// worst case of a batch's fixed cost, which a gateway whose batches come
// one at a time pays (several callers at once share a wake-up). On
// loopback the kernel's work of delivering the reply counts as Redis's.
// The values are 150 bytes, as a recipient's at the end of the data set; 6
// keys is what a batch of a gateway at full load gathers.
func roundTrips(core string) error {
	srv, err := startRedis(core)
	if err != nil {
		return err
	}
	defer srv.stop()
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: srv.addr, PoolSize: 1})
	defer c.Close()
	const n, iters = 6, 20_000
	keys := make([]string, n)
	var commitArgs []any
	val := strings.Repeat("v", 150)
	for i := range keys {
		keys[i] = fmt.Sprintf("freqcap:recipient{u%d}", i)
		if err := c.Set(ctx, keys[i], val, 0).Err(); err != nil {
			return err
		}
		commitArgs = append(commitArgs, val, val, 86_400_000) // unchanged, so written
	}
	commit := redis.NewScript(lua.Commit)
	if err := commit.Load(ctx, c).Err(); err != nil {
		return err
	}
	read := func(p redis.Pipeliner) { p.Time(ctx); p.MGet(ctx, keys...) }
	write := func(p redis.Pipeliner) { p.EvalSha(ctx, commit.Hash(), keys, commitArgs...) }
	fmt.Printf("\n| one round trip (one caller, Redis idle between) carrying | Redis CPU µs | round trips/s |\n|---|---|---|\n")
	for _, rt := range []struct {
		name string
		cmds func(redis.Pipeliner)
	}{
		{"PING", func(p redis.Pipeliner) { p.Ping(ctx) }},
		{fmt.Sprintf("a batch's read: TIME, MGET of %d keys", n), read},
		{fmt.Sprintf("a batch's write: commit.lua over %d keys", n), write},
		{"a write and the next batch's read", func(p redis.Pipeliner) { write(p); read(p) }},
	} {
		_, cpu0, err := stats(ctx, c)
		if err != nil {
			return err
		}
		start := time.Now()
		for range iters {
			if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error { rt.cmds(p); return nil }); err != nil {
				return err
			}
		}
		elapsed := time.Since(start)
		_, cpu1, err := stats(ctx, c)
		if err != nil {
			return err
		}
		fmt.Printf("| %s | %.1f | %.0f |\n", rt.name, (cpu1-cpu0)*1e6/iters, iters/elapsed.Seconds())
	}
	return nil
}
