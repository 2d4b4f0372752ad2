package redisstore

import (
	"context"
	"fmt"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// testCommitNodeStopsAtAKeyElsewhere proves what the lanes' write on a
// cluster rests on: a commit_node.lua run on one master writes keys of
// several slots that master serves, and a run that names a key another
// master serves (its slot moved since the read) stops at its reads with
// nothing written, with an error the store takes for "not run here", so
// that its decisions go to freqcap.lua instead of failing.
func testCommitNodeStopsAtAKeyElsewhere(t *testing.T, c *redistest.Cluster) {
	ctx := context.Background()
	masters := c.Masters(t)
	a, b := masters[0], masters[1]
	var onA []string // keys of two slots of master a
	for i := 0; len(onA) < 2; i++ {
		key := fmt.Sprintf("freqcap-test:node-commit{%d}", i)
		if c.MasterOf(t, key).Addr == a.Addr && (len(onA) == 0 || c.KeySlot(t, key) != c.KeySlot(t, onA[0])) {
			onA = append(onA, key)
		}
	}
	onA1, onA2 := onA[0], onA[1]
	onB := clusterProbeKey(t, c, b)
	node := redis.NewClient(&redis.Options{Addr: a.Addr})
	defer node.Close()
	cl := c.Client(t)
	for _, k := range []string{onA1, onA2, onB} {
		cl.Del(ctx, k)
	}
	commit := func(names ...string) ([]any, error) {
		run := &decidedInGo{lane: &lane{cluster: true}, names: names}
		for range names {
			run.args = append(run.args, "", "new", "60000")
		}
		packed := make([]byte, 4*len(names)) // one component: all or none
		run.args = append(run.args, packed)
		_, _, keys, args := run.commitRun()
		return commitNodeScript.Run(ctx, node, keys, args...).Slice()
	}

	if list, err := commit(onA1, onA2); err != nil || len(list) != 0 {
		t.Fatalf("two slots of one master: %v, %v; want both written", list, err)
	}
	for _, k := range []string{onA1, onA2} {
		if v, _ := node.Get(ctx, k).Result(); v != "new" {
			t.Fatalf("%s = %q after the run; want %q", k, v, "new")
		}
	}
	node.Del(ctx, onA1)
	node.Del(ctx, onA2)

	_, err := commit(onA1, onB)
	if err == nil || !notOnThisMaster(err) {
		t.Fatalf("a run naming a key of another master: %v; want an error taken for not run here", err)
	}
	if n, _ := node.Exists(ctx, onA1).Result(); n != 0 {
		t.Fatalf("%s was written by a run that stopped at %s: the reads must come first", onA1, onB)
	}
}
