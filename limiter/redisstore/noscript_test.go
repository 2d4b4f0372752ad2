package redisstore

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// A write whose script the server no longer holds (a restart, SCRIPT
// FLUSH) goes again after its round trip, which already carried the next
// batch's read: that batch reads again, so its write does not find the
// keys changed and nothing is decided twice. Every count stays exact.
func TestWriteSentAgainIsReadAfter(t *testing.T) {
	rule := &limiter.Rule{Name: "hour", By: []string{"recipient"}, Limit: 3, Window: limiter.Window{Duration: time.Hour}}
	c := redistest.Client(t)
	// One batch in flight and no batch too small for Go: the only writes
	// are this loop's, so a conflict can only come from its own order.
	s := New(c, Options{Timeout: 5 * time.Second, Prefix: "noscript:", GoBatchMin: 1, InFlight: 1})
	defer s.Close()
	const rounds, recipients, each = 10, 8, 5
	for round := 0; round < rounds; round++ {
		if err := c.ScriptFlush(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		at := limitertest.MustParse(t, "2026-05-01T10:00:00Z").Add(time.Duration(round) * 2 * time.Hour)
		burst(t, s, at, rule, recipients, each)
	}
	if n := s.Conflicts(); n != 0 {
		t.Fatalf("%d writes found a key changed after a write was sent again", n)
	}
}

// A cluster master's write that meets NOSCRIPT (the master restarted, or
// its scripts were flushed) goes again to that master, on its own client:
// the cluster client's slot map may name another node for the key by then,
// or still (a master just removed answers CLUSTERDOWN), which failed
// TestRemovedMasterInStaleSlotMap now and then. With every master's
// scripts flushed before each burst, every commit_node.lua EVAL goes on a
// master's client, none through the cluster client, and every count stays
// exact.
func TestMasterWriteSentAgainOnItsMaster(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	cl := clusterConfigClient(t, c, 5*time.Second)().(*redis.ClusterClient)
	viaCluster, viaMaster := &sentCommands{}, &sentCommands{}
	cl.AddHook(viaCluster)
	cl.OnNewNode(func(n *redis.Client) { n.AddHook(viaMaster) })
	// Writes through commit_node.lua whatever the server (no SET … IFEQ),
	// and lone decisions decided in Go.
	s := New(cl, Options{Timeout: 5 * time.Second, Prefix: "noscriptc:", GoBatchMin: 1, NoNativeWrite: true})
	defer s.Close()
	rule := &limiter.Rule{Name: "hour", By: []string{"recipient"}, Limit: 3, Window: limiter.Window{Duration: time.Hour}}
	const rounds, recipients, each = 5, 12, 5
	for round := 0; round < rounds; round++ {
		for _, m := range c.Masters(t) {
			if err := m.Admin().ScriptFlush(context.Background()).Err(); err != nil {
				t.Fatal(err)
			}
		}
		at := limitertest.MustParse(t, "2026-05-01T10:00:00Z").Add(time.Duration(round) * 2 * time.Hour)
		burst(t, s, at, rule, recipients, each)
	}
	onMasters, _ := viaMaster.take()
	if !slices.Contains(onMasters, "eval commit_node") {
		t.Fatalf("no write met NOSCRIPT: the test did not test")
	}
	throughCluster, _ := viaCluster.take()
	if n := len(slices.DeleteFunc(throughCluster, func(name string) bool { return name != "eval commit_node" })); n != 0 {
		t.Errorf("%d commit_node.lua runs went again through the cluster client's slot map", n)
	}
}
