package lease

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter/redisstore"
)

// On a 3-master Redis Cluster, the traffic (a recipient's cap
// beside the coupon budget, on another master) takes the budget a block
// at a time; a recipient's denial gives its coupon back, and Close gives
// back the unspent units, so the cluster counts exactly the sends.
func TestLeaseOnACluster(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
	t.Cleanup(func() { cl.Close() })
	inner := &counting{Store: redisstore.New(cl, redisstore.Options{Prefix: "lease:", Timeout: 5 * time.Second, Cluster: true})}
	t.Cleanup(func() { inner.Close() })
	g := New(inner, Options{Term: time.Minute, Sweep: -1, KeepInnerOpen: true})
	rule := coupons(100)
	admitted := 0
	for i := range 60 {
		who := string(rune('a' + i%40)) // 40 recipients; the first 20 twice, denied the second time
		if d := mustDecide(t, g, req(check(rule, "spring"), check(perRecipient, who))); d.Allowed {
			admitted++
		}
	}
	if admitted != 40 {
		t.Fatalf("%d admitted; want 40 (40 recipients once)", admitted)
	}
	if n := inner.decides.Load(); n != 61 {
		t.Errorf("%d store decisions; want 61 (one block, 60 recipient caps)", n)
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if got := used(t, inner, check(rule, "spring")); got != 40 {
		t.Errorf("the cluster counts %d coupons after Close; want the 40 sent", got)
	}
}
