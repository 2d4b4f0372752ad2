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

// TestClusterExemptMarks: on a 3-master cluster, where a request's parts
// run on the shards of their hash tags, an exempt send past a recipient's
// cap and a campaign's budget (two tags) is marked in both logs, alone
// and in a batch; refunding it takes both marks back.
func TestClusterExemptMarks(t *testing.T) {
	ctx := context.Background()
	c := redistest.StartCluster(t, 3, 0)
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { cl.Close() })
	s := New(cl, Options{Prefix: "exempt:", Timeout: 5 * time.Second, Cluster: true})
	t.Cleanup(func() { s.Close() })
	mine := &limiter.Rule{Name: "mine", By: []string{"r"}, Limit: 1, Window: limiter.Window{Duration: time.Hour}}
	budget := &limiter.Rule{Name: "budget", By: []string{"c"}, Limit: 1, Window: limiter.Window{Duration: time.Hour}}
	req := func(exempt bool) *limiter.Request {
		r := limitertest.Req(time.Time{}, limitertest.Vals{"r": "amy", "c": "promo"}, mine, budget)
		r.Exempt = exempt
		return r
	}
	limitertest.MustDecide(t, s, req(false))
	d := limitertest.MustDecide(t, s, req(true))
	ds, err := s.DecideBatch(ctx, []limiter.Request{*req(true), *req(false)}, limiter.BatchEach)
	if err != nil || !d.Allowed || !ds[0].Allowed || ds[1].Allowed {
		t.Fatalf("exempt sends past the caps: %v; batch %v, %v", d.Allowed, ds, err)
	}
	marks := func() string {
		h, err := s.History(ctx, req(false))
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(h[0].Exempt, h[1].Exempt)
	}
	if got := marks(); got != "[0 1 1] [0 1 1]" {
		t.Fatalf("marks %s; want the two exempt sends in both logs", got)
	}
	if ok, err := s.Refund(ctx, d.ID()); !ok || err != nil {
		t.Fatalf("refund: %v, %v", ok, err)
	}
	if got := marks(); got != "[0 1] [0 1]" {
		t.Fatalf("after a refund, marks %s", got)
	}
}
