package redisstore

import (
	"strings"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
)

// TestClusterFailoverUnderLoad promotes a replica inside the cluster
// (CLUSTER FAILOVER on it: coordinated, then FORCE) while three gateways
// send the seed config (see topologyLoad), and holds the counts as
// TestReshardUnderLoad does.
//
// A coordinated failover pauses the old master's writes until the replica
// has caught up: decisions meanwhile wait and may time out (on_error;
// measured), and nothing acknowledged is lost, so every recipient ends
// counted exactly its limit (a decision that timed out may have run: an
// over-count, measured). A forced one does not wait for the replica: what
// the old master acknowledged but had not yet replicated is lost, and
// those recipients are admitted again, past their limit: measured and
// reported, not failed (docs/operations.md says what it costs).
func TestClusterFailoverUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: failovers under load take about 20 s")
	}
	c := redistest.StartCluster(t, 3, 1)
	const timeout = DefaultTimeout
	for _, option := range []string{"", "FORCE"} {
		name := "coordinated"
		if option != "" {
			name = strings.ToLower(option)
		}
		t.Run(name, func(t *testing.T) {
			prefix := "fo-" + name + ":"
			l := startTopologyLoad(t, reshardGateways, prefix, timeout, clusterConfigClient(t, c, timeout))
			defer l.finish()
			time.Sleep(time.Second)
			slot := c.KeySlot(t, limiter.KeyFor(prefix, "recipient", l.cohort.Load().recipients[0]))
			var old, promoted *redistest.Node
			var switched time.Duration
			took := l.during("CLUSTER FAILOVER "+option, func() { old, promoted, switched = c.FailoverWith(t, slot, option) })
			t.Logf("CLUSTER FAILOVER %s: %s took over from %s in %s (%s until the cluster was ready)", option, promoted.Addr, old.Addr, switched.Round(time.Millisecond), took.Round(time.Millisecond))
			l.during("after", func() { time.Sleep(time.Second) })
			l.finish()
			decisions, failed := l.report(t)
			if refused := failed - l.failures["timeout"]; refused > 0 {
				t.Errorf("%d of %d decisions failed with an error other than a timeout", refused, decisions)
			}
			l.check(t, option == "FORCE")
		})
	}
}
