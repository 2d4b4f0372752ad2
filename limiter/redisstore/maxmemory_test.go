package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// A Redis at maxmemory under noeviction refuses every write with OOM:
// each decision fails at once (no wait, nothing written) with
// ErrOutOfMemory, which is also ErrStore, and Reason names it; reads
// (Usage) still answer, and once memory is freed the history recorded
// before is all there. Decided in Go and in the script, single and batch
// sends, and on a cluster.
func TestOutOfMemory(t *testing.T) {
	ctx := context.Background()
	const timeout = time.Second
	run := func(t *testing.T, s *Store, limitMemory func(bytes string)) {
		t.Helper()
		alice := func(content string) *limiter.Request {
			return limitertest.Req(time.Time{}, limitertest.Vals{"recipient": "alice", "content": content}, limitertest.SeedRules()...)
		}
		if _, err := s.Decide(ctx, alice("a")); err != nil {
			t.Fatal(err)
		}
		limitMemory("1")
		start := time.Now()
		_, err := s.Decide(ctx, alice("b"))
		took := time.Since(start)
		if !errors.Is(err, ErrOutOfMemory) || !errors.Is(err, limiter.ErrStore) || Reason(err) != ReasonOutOfMemory {
			t.Fatalf("a decision at maxmemory: %v (reason %q); want ErrOutOfMemory", err, Reason(err))
		}
		if took > timeout/2 {
			t.Errorf("the refusal took %s: it should come at once", took)
		}
		t.Logf("refused in %s: %v", took.Round(time.Microsecond), err)
		for _, mode := range []limiter.BatchMode{limiter.BatchAll, limiter.BatchEach} {
			reqs := []limiter.Request{*limitertest.Req(time.Time{}, limitertest.Vals{"recipient": "bob", "content": "b"}, limitertest.SeedRules()...), *alice("c")}
			if _, err := s.DecideBatch(ctx, reqs, mode); !errors.Is(err, ErrOutOfMemory) {
				t.Errorf("a batch (%s) at maxmemory: %v; want ErrOutOfMemory", mode, err)
			}
		}
		d, err := s.Usage(ctx, alice("a"))
		if err != nil || d.Results[0].Used != 1 {
			t.Errorf("usage at maxmemory: %v %+v; want alice's one admission", err, d)
		}
		limitMemory("0")
		d, err = s.Decide(ctx, alice("d"))
		if err != nil || !d.Allowed || d.Results[0].Used != 2 {
			t.Fatalf("after memory was freed: %v %+v; want the second admission", err, d)
		}
	}
	configSet := func(t *testing.T, admins ...*redis.Client) func(string) {
		return func(bytes string) {
			for _, a := range admins {
				if err := a.ConfigSet(ctx, "maxmemory", bytes).Err(); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	for _, scriptOnly := range []bool{false, true} {
		t.Run(fmt.Sprint("standalone, script_only=", scriptOnly), func(t *testing.T) {
			srv := redistest.Start(t, "--maxmemory-policy", "noeviction")
			admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
			defer admin.Close()
			s, _ := newConfiguredStore(t, Config{Addresses: []string{srv.Addr}, Timeout: timeout, ScriptOnly: scriptOnly}, "oom:")
			run(t, s, configSet(t, admin))
		})
	}
	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t, 3, 0)
		var admins []*redis.Client
		for _, n := range c.Nodes {
			admins = append(admins, n.Admin())
		}
		s, _ := newConfiguredStore(t, Config{Addresses: c.Addrs(), Cluster: true, Timeout: timeout}, "oom:")
		run(t, s, configSet(t, admins...))
	})
}

// Under an evicting policy a Redis at maxmemory makes room by deleting
// keys, and a recipient whose key is deleted loses its history: its caps
// start again from zero. Every key the store writes has a TTL, so
// volatile-lru evicts them as allkeys-lru does; under noeviction the
// writes are refused instead (ErrOutOfMemory) and nothing recorded is
// lost. This is why docs/operations.md asks for noeviction.
func TestEvictionForgetsHistory(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: fills a Redis to maxmemory")
	}
	ctx := context.Background()
	const recipients = 12000
	for _, policy := range []string{"noeviction", "volatile-lru", "allkeys-lru"} {
		t.Run(policy, func(t *testing.T) {
			srv := redistest.Start(t, "--maxmemory-policy", policy)
			admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
			defer admin.Close()
			used := memoryUsed(t, admin)
			// Room for about a third of the recipients' keys.
			if err := admin.ConfigSet(ctx, "maxmemory", strconv.FormatInt(used+1<<20, 10)).Err(); err != nil {
				t.Fatal(err)
			}
			s, _ := newConfiguredStore(t, Config{Addresses: []string{srv.Addr}, Timeout: 2 * time.Second}, "evict:")
			admitted := make([]bool, recipients)
			var oom int
			for i := 0; i < recipients; i += 100 {
				reqs := make([]limiter.Request, 100)
				for j := range reqs {
					reqs[j] = *limitertest.Req(time.Time{}, limitertest.Vals{"recipient": fmt.Sprint("r", i+j), "content": "c"}, limitertest.SeedRules()...)
				}
				ds, err := s.DecideBatch(ctx, reqs, limiter.BatchEach)
				if errors.Is(err, ErrOutOfMemory) {
					oom += len(reqs)
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				for j, d := range ds {
					admitted[i+j] = d.Allowed
				}
			}
			// Each admitted recipient's count, read by 16 callers at once
			// (the store batches their reads).
			var forgotten, kept atomic.Int64
			var wg sync.WaitGroup
			for w := 0; w < 16; w++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := w; i < recipients; i += 16 {
						if !admitted[i] {
							continue
						}
						d, err := s.Usage(ctx, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": fmt.Sprint("r", i)}, limitertest.SeedRules()[1]))
						switch {
						case err != nil:
							t.Error(err)
							return
						case d.Results[0].Used == 0:
							forgotten.Add(1)
						default:
							kept.Add(1)
						}
					}
				}()
			}
			wg.Wait()
			evicted := infoField(t, admin, "stats", "evicted_keys")
			t.Logf("%s: %d recipients admitted, %d refused with OOM; of the admitted, %d still counted, %d forgotten; evicted_keys %s",
				policy, kept.Load()+forgotten.Load(), oom, kept.Load(), forgotten.Load(), evicted)
			switch {
			case policy == "noeviction" && (forgotten.Load() > 0 || oom == 0):
				t.Errorf("noeviction: %d forgotten, %d refused; want none forgotten, writes refused", forgotten.Load(), oom)
			case policy != "noeviction" && forgotten.Load() == 0:
				t.Errorf("%s evicted no recipient's history: the test did not fill the memory", policy)
			}
		})
	}
}

// memoryUsed is the server's used_memory.
func memoryUsed(t *testing.T, c *redis.Client) int64 {
	t.Helper()
	n, err := strconv.ParseInt(infoField(t, c, "memory", "used_memory"), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// infoField is one field of an INFO section.
func infoField(t *testing.T, c *redis.Client, section, field string) string {
	t.Helper()
	info, err := c.Info(context.Background(), section).Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == field {
			return v
		}
	}
	t.Fatalf("INFO %s has no %s", section, field)
	return ""
}
