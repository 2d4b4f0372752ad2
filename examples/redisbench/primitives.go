package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/lua"
)

// A primitive is one way of reading, checking or writing a batch's keys,
// measured alone: what Redis spends a key on it bounds what any batch
// design built on it can cost.
type primitive struct {
	name string
	run  func(ctx context.Context, c *redis.Client, keys []string) error
}

// primitiveValue is about what a recipient's value holds at the end of the
// data set's day (floorValueBytes); every write writes it unchanged, so the
// compare-and-sets always succeed.
var primitiveValue = strings.Repeat("v", floorValueBytes)

// primitiveTTL is the expiry every write sets, as the store's writes do.
const primitiveTTL = "90000000"

func primitives() []primitive {
	commit := redis.NewScript(lua.Commit)
	argsOnly := redis.NewScript("return #ARGV")
	mgetInLua := redis.NewScript("return #redis.call('MGET', unpack(KEYS))")
	getEachInLua := redis.NewScript("local v = {} for i = 1, #KEYS do v[i] = redis.call('GET', KEYS[i]) end return v")
	setInLua := redis.NewScript("for i = 1, #KEYS do redis.call('SET', KEYS[i], ARGV[i], 'PX', ARGV[#ARGV]) end return 0")
	values := func(n int, per ...string) []any {
		args := make([]any, 0, n*len(per))
		for range n {
			for _, v := range per {
				args = append(args, v)
			}
		}
		return args
	}
	// watchChunk is the most keys one WATCH takes: Redis 7.0 looks each
	// watched key up in the client's list of them, so the cost of a WATCH
	// grows with the square of its keys (100 was the cheapest tried).
	const watchChunk = 100
	read := func(ctx context.Context, c *redis.Client, keys []string) error {
		return c.MGet(ctx, keys...).Err()
	}
	write := func(ctx context.Context, c *redis.Client, keys []string) error {
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error { setAll(ctx, p, keys); return nil })
		return err
	}
	return []primitive{
		{"read: MGET", read},
		{"read: a GET a key, pipelined (a cluster master's keys of many slots)", func(ctx context.Context, c *redis.Client, keys []string) error {
			_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
				for _, k := range keys {
					p.Get(ctx, k)
				}
				return nil
			})
			return err
		}},
		{"read: a script GETs each key and returns the values", func(ctx context.Context, c *redis.Client, keys []string) error {
			return getEachInLua.Run(ctx, c, keys).Err()
		}},
		{"write: SET … PX, pipelined", write},
		{"the floor: MGET, then SET … PX (no check)", func(ctx context.Context, c *redis.Client, keys []string) error {
			if err := read(ctx, c, keys); err != nil {
				return err
			}
			return write(ctx, c, keys)
		}},
		{"a script given the keys and values, doing nothing", func(ctx context.Context, c *redis.Client, keys []string) error {
			return argsOnly.Run(ctx, c, keys, values(len(keys), primitiveValue)...).Err()
		}},
		{"MGET inside a script", func(ctx context.Context, c *redis.Client, keys []string) error {
			return mgetInLua.Run(ctx, c, keys).Err()
		}},
		{"SET … PX inside a script", func(ctx context.Context, c *redis.Client, keys []string) error {
			return setInLua.Run(ctx, c, keys, append(values(len(keys), primitiveValue), primitiveTTL)...).Err()
		}},
		{"compare-and-set by WATCH, MGET, MULTI, SET … PX, EXEC (100 keys a transaction)", func(ctx context.Context, c *redis.Client, keys []string) error {
			for chunk := range slices.Chunk(keys, watchChunk) {
				err := c.Watch(ctx, func(tx *redis.Tx) error {
					if err := tx.MGet(ctx, chunk...).Err(); err != nil {
						return err
					}
					_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error { setAll(ctx, p, chunk); return nil })
					return err
				}, chunk...)
				if err != nil {
					return err
				}
			}
			return nil
		}},
		{"compare-and-set by commit.lua, after an MGET (this store's batch)", func(ctx context.Context, c *redis.Client, keys []string) error {
			if err := read(ctx, c, keys); err != nil {
				return err
			}
			reply, err := commit.Run(ctx, c, keys, values(len(keys), primitiveValue, primitiveValue, primitiveTTL)...).Int()
			if err == nil && reply != 0 {
				err = fmt.Errorf("commit.lua found key %d changed", reply)
			}
			return err
		}},
	}
}

// measurePrimitives prints what each primitive costs Redis a key, over
// batches of size keys drawn in turn from keys keys (200,000 by default:
// like the data set's recipients, too many for the CPU's caches), the
// median of runs rounds alternated between the primitives.
func measurePrimitives(core, addr string, keys, size, runs int) error {
	ctx := context.Background()
	target := addr
	if target == "" {
		srv, err := startRedis(core)
		if err != nil {
			return err
		}
		defer srv.stop()
		target = srv.addr
	}
	c := redis.NewClient(&redis.Options{Addr: target})
	defer c.Close()
	if err := c.FlushAll(ctx).Err(); err != nil {
		return err
	}
	all := make([]string, keys)
	for i := range all {
		all[i] = "freqcap:recipient{u" + strconv.Itoa(i) + "}"
	}
	for batch := range slices.Chunk(all, size) {
		if _, err := c.Pipelined(ctx, func(p redis.Pipeliner) error { setAll(ctx, p, batch); return nil }); err != nil {
			return err
		}
	}
	ps := primitives()
	if ok, err := hasIFEQ(ctx, c); err != nil {
		return err
	} else if ok {
		ps = append(ps, ifeqPrimitive())
	} else {
		fmt.Println("(the server has no SET … IFEQ: its native compare-and-set is not measured)")
	}
	costs := make([][]float64, len(ps))
	for range runs {
		for i, p := range ps {
			_, cpu0, err := stats(ctx, c)
			if err != nil {
				return err
			}
			// Every key once a round, in batches, so each batch finds its
			// keys as cold as a batch of the data set does.
			for batch := range slices.Chunk(all, size) {
				if err := p.run(ctx, c, batch); err != nil {
					return fmt.Errorf("%s: %w", p.name, err)
				}
			}
			_, cpu1, err := stats(ctx, c)
			if err != nil {
				return err
			}
			costs[i] = append(costs[i], (cpu1-cpu0)*1e6/float64(keys))
		}
	}
	fmt.Printf("\n| %s: %d keys of %d bytes, %d a batch: what Redis spends a key on | Redis CPU µs a key (median of %d; runs) |\n|---|---|\n", serverVersion(), keys, floorValueBytes, size, runs)
	for i, p := range ps {
		runsText := make([]string, len(costs[i]))
		for j, v := range costs[i] {
			runsText[j] = fmt.Sprintf("%.2f", v)
		}
		slices.Sort(costs[i])
		fmt.Printf("| %s | %.2f (%s) |\n", p.name, costs[i][len(costs[i])/2], strings.Join(runsText, ", "))
	}
	return nil
}

// setAll writes every key as the primitives do.
func setAll(ctx context.Context, p redis.Pipeliner, keys []string) {
	for _, k := range keys {
		p.Do(ctx, "SET", k, primitiveValue, "PX", primitiveTTL)
	}
}
