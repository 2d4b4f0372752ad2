package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// TestClusterFailedBatchRecordsNothing proves that a batch send that fails
// on a cluster (one master does not answer within the timeout) leaves
// nothing recorded on the masters that answered, under BatchAll and
// BatchEach alike: the entries those masters admitted are given back once
// every call is settled. A probe's batches answered 503 while one master
// was paused stayed counted on the other two, 5 runs of 5.
func TestClusterFailedBatchRecordsNothing(t *testing.T) {
	ctx := context.Background()
	c := redistest.StartCluster(t, 3, 0)
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { cl.Close() })
	s := New(cl, Options{Prefix: "failed:", Timeout: 100 * time.Millisecond, Cluster: true})
	t.Cleanup(func() { s.Close() })
	rule := &limiter.Rule{Name: "hour", By: []string{"r"}, Limit: 10, Window: limiter.Window{Duration: time.Hour}}

	for _, mode := range []limiter.BatchMode{limiter.BatchAll, limiter.BatchEach} {
		t.Run(mode.String(), func(t *testing.T) {
			// A recipient on each master.
			byMaster := map[string]string{}
			var order []string
			for i := 0; len(byMaster) < 3 && i < 1000; i++ {
				v := fmt.Sprintf("%s-%d", mode, i)
				m, err := cl.MasterForKey(ctx, "failed:r{"+v+"}")
				if err != nil {
					t.Fatal(err)
				}
				if addr := m.Options().Addr; byMaster[addr] == "" {
					byMaster[addr] = v
					order = append(order, addr)
				}
			}
			req := func(v string) limiter.Request {
				return *limitertest.Req(time.Time{}, limitertest.Vals{"r": v}, rule)
			}
			var reqs []limiter.Request
			for _, addr := range order {
				limitertest.MustDecide(t, s, ptr(req(byMaster[addr]))) // the lanes exist, the scripts loaded
				reqs = append(reqs, req(byMaster[addr]))
			}
			stalled := redis.NewClient(&redis.Options{Addr: order[2]})
			defer stalled.Close()
			if err := stalled.Do(ctx, "CLIENT", "PAUSE", "500", "ALL").Err(); err != nil {
				t.Fatal(err)
			}
			defer time.Sleep(time.Until(time.Now().Add(600 * time.Millisecond))) // the pause over
			if _, err := s.DecideBatch(ctx, reqs, mode); err == nil {
				t.Fatal("a batch with a master paused past the timeout was decided")
			}
			// The pause ends, the stalled call is answered, and what the
			// other two masters recorded is given back.
			deadline := time.Now().Add(5 * time.Second)
			for _, addr := range order[:2] {
				for {
					d := limitertest.MustUsage(t, s, ptr(req(byMaster[addr])))
					if used := d.Results[0].Used; used == 1 {
						break
					} else if time.Now().After(deadline) {
						t.Fatalf("%s (on %s, which answered): used %d after the failed batch, want the 1 sent before it", byMaster[addr], addr, used)
					}
					time.Sleep(20 * time.Millisecond)
				}
			}
		})
	}
}

func ptr[T any](v T) *T { return &v }
