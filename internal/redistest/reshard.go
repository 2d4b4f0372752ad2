package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// This file changes a running cluster's topology as an operator would,
// with redis-cli --cluster: slots moved between masters (reshard), a master
// added and given its share (add-node, rebalance), a master emptied and
// removed (rebalance with weight 0, del-node). redis-cli moves a slot the
// way every Redis Cluster tool does: CLUSTER SETSLOT IMPORTING on the
// target, MIGRATING on the source, MIGRATE of its keys in groups, then
// SETSLOT NODE on each master; clients meanwhile meet ASK, TRYAGAIN and
// MOVED. Every node's cluster-node-timeout and the redis-cli of Debian's
// redis-tools work with every server this package runs (Redis 7.0 and 8,
// Valkey 8).

// CLIEnv names the environment variable that chooses the redis-cli binary;
// by default redis-cli on PATH.
const CLIEnv = "FREQCAP_REDIS_CLI"

// needCLI returns the redis-cli to run, skipping the test (or failing it
// under FREQCAP_REQUIRE_REDIS=1, or when CLIEnv names no executable) when
// there is none.
func needCLI(tb testing.TB) string {
	tb.Helper()
	if bin := os.Getenv(CLIEnv); bin != "" {
		path, err := exec.LookPath(bin)
		if err != nil {
			tb.Fatalf("%s=%s names no executable: %v", CLIEnv, bin, err)
		}
		return path
	}
	path, err := exec.LookPath("redis-cli")
	if err != nil {
		if os.Getenv("FREQCAP_REQUIRE_REDIS") == "1" {
			tb.Fatalf("redis-cli is not on PATH and FREQCAP_REQUIRE_REDIS=1: install it (apt-get install redis-tools)")
		}
		tb.Skip("redis-cli is not on PATH: skipping a test that reshards a cluster (set FREQCAP_REQUIRE_REDIS=1 to make this a failure)")
	}
	return path
}

// ansi matches the colour codes redis-cli puts around its messages.
var ansi = regexp.MustCompile("\x1b\\[[0-9;]*m")

// clusterCLI runs redis-cli --cluster with args and returns its output,
// without colours and without the progress lines of each slot moved. It
// fails tb when redis-cli exits non-zero or reports an error (some
// refusals, such as "Please fix your cluster problems", exit 0).
//
// redis-cli first compares every node's whole view of the cluster, epochs
// included, and refuses before changing anything while one lags ("Nodes
// don't agree about configuration!"), which the last change's news may
// still do after WaitReady saw the slots agree: it is asked again, for up
// to 5 s, and goes ahead once the news has spread.
func (c *Cluster) clusterCLI(tb testing.TB, args ...string) string {
	tb.Helper()
	for attempt := 1; ; attempt++ {
		text, err := c.tryClusterCLI(tb, args...)
		if err == nil {
			return text
		}
		if !strings.Contains(text, "Nodes don't agree about configuration") || attempt == 50 {
			tb.Fatalf("%v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// tryClusterCLI is clusterCLI returning its failure instead of failing tb.
func (c *Cluster) tryClusterCLI(tb testing.TB, args ...string) (string, error) {
	tb.Helper()
	cmd := exec.Command(needCLI(tb), append([]string{"--cluster"}, args...)...)
	out, err := cmd.CombinedOutput()
	text := ansi.ReplaceAllString(string(out), "")
	var kept []string
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "Moving slot ") || strings.Trim(line, "#") == "" {
			continue
		}
		kept = append(kept, line)
	}
	text = strings.Join(kept, "\n")
	refused := strings.Contains(text, "[ERR]") || (strings.Contains(text, "*** ") && !strings.Contains(text, "*** No rebalancing needed"))
	if err != nil || refused {
		return text, fmt.Errorf("redis-cli --cluster %s: %v\n%s", strings.Join(args, " "), err, text)
	}
	return text, nil
}

// Reshard moves n slots from the master from to the master to with
// redis-cli --cluster reshard, then waits until the cluster is ready (see
// WaitReady). It returns how long redis-cli took.
func (c *Cluster) Reshard(tb testing.TB, from, to *Node, n int) time.Duration {
	tb.Helper()
	start := time.Now()
	c.clusterCLI(tb, "reshard", to.Addr, "--cluster-from", from.ID, "--cluster-to", to.ID,
		"--cluster-slots", fmt.Sprint(n), "--cluster-yes")
	took := time.Since(start)
	c.WaitReady(tb)
	return took
}

// AddMaster starts a node, joins it to the cluster as a master with no
// slots (redis-cli --cluster add-node) and waits until every node knows it
// and it reports cluster_state:ok: a node that does not yet refuses the
// MIGRATE that would give it slots ("CLUSTERDOWN The cluster is down").
// The node joins Nodes and stops when the test ends.
func (c *Cluster) AddMaster(tb testing.TB) *Node {
	tb.Helper()
	n := startClusterNode(tb, need(tb))
	id, err := n.admin.Do(context.Background(), "CLUSTER", "MYID").Text()
	if err != nil {
		tb.Fatalf("cluster myid on %s: %v", n.Addr, err)
	}
	n.ID = id
	c.clusterCLI(tb, "add-node", n.Addr, c.Masters(tb)[0].Addr)
	c.Nodes = append(c.Nodes, n)
	c.waitAcquainted(tb)
	c.WaitReady(tb)
	return n
}

// waitAcquainted waits until every node knows every other, none of them
// in a handshake: a master asked to move slots to a node it does not know
// yet refuses ("I don't know about node"), and WaitReady does not see a
// master without slots.
func (c *Cluster) waitAcquainted(tb testing.TB) {
	tb.Helper()
	ctx := context.Background()
	waitUntil(tb, 10*time.Second, "every node to know every other", func() error {
		for _, n := range c.Nodes {
			lines, err := clusterNodes(ctx, n.admin)
			if err != nil {
				return err
			}
			if len(lines) != len(c.Nodes) {
				return fmt.Errorf("%s knows %d of %d nodes", n.Addr, len(lines), len(c.Nodes))
			}
			for _, l := range lines {
				if l.has("handshake") || l.has("noaddr") || !(l.has("master") || l.has("slave")) {
					return fmt.Errorf("%s: node %s is in %s", n.Addr, l.id, l.flags)
				}
			}
		}
		return nil
	})
}

// Rebalance gives every master, the empty ones included, its share of
// the slots (redis-cli --cluster rebalance --cluster-use-empty-masters),
// then waits until the cluster is ready. Shares are equal but for the
// weights given ("<node id>=0.25"; a master's weight is 1 by default). It
// returns how long redis-cli took.
func (c *Cluster) Rebalance(tb testing.TB, weights ...string) time.Duration {
	tb.Helper()
	args := []string{"rebalance", c.Masters(tb)[0].Addr, "--cluster-use-empty-masters"}
	if len(weights) > 0 {
		args = append(append(args, "--cluster-weight"), weights...)
	}
	start := time.Now()
	c.clusterCLI(tb, args...)
	took := time.Since(start)
	c.WaitReady(tb)
	return took
}

// RemoveMaster empties the master m (redis-cli --cluster rebalance with
// its weight 0, which spreads its slots over the other masters) and
// removes it (del-node: every other node forgets it, and it is sent
// CLUSTER RESET SOFT). m must have no replica. As after a real del-node,
// m keeps running, now a cluster of its own that serves no slot, so a
// client that still knows its address meets it; it leaves Nodes and stops
// when the test ends. It returns how long redis-cli took for each step.
func (c *Cluster) RemoveMaster(tb testing.TB, m *Node) (empty, remove time.Duration) {
	tb.Helper()
	if r := c.ReplicaOf(tb, m); r != nil {
		tb.Fatalf("RemoveMaster(%s): it has the replica %s", m.Addr, r.Addr)
	}
	var other *Node
	for _, n := range c.Masters(tb) {
		if n != m {
			other = n
			break
		}
	}
	if other == nil {
		tb.Fatalf("RemoveMaster(%s): it is the only master", m.Addr)
	}
	start := time.Now()
	if c.SlotsOf(tb)[m.Addr] > 0 {
		c.clusterCLI(tb, "rebalance", other.Addr, "--cluster-weight", m.ID+"=0")
		empty = time.Since(start)
		c.WaitReady(tb)
	}
	start = time.Now()
	c.clusterCLI(tb, "del-node", other.Addr, m.ID)
	remove = time.Since(start)
	for i, n := range c.Nodes {
		if n == m {
			c.Nodes = append(c.Nodes[:i:i], c.Nodes[i+1:]...)
			break
		}
	}
	c.waitAcquainted(tb)
	c.WaitReady(tb)
	return empty, remove
}

// SlotsOf returns how many slots each master serves, by address.
func (c *Cluster) SlotsOf(tb testing.TB) map[string]int {
	tb.Helper()
	out := map[string]int{}
	for _, m := range c.Masters(tb) {
		me, err := myself(context.Background(), m.admin)
		if err != nil {
			tb.Fatal(err)
		}
		for _, r := range me.slots {
			out[m.Addr] += r[1] - r[0] + 1
		}
	}
	return out
}

// MoveSlot moves one slot to the master to by hand, with the commands
// redis-cli sends (CLUSTER SETSLOT IMPORTING on the target, MIGRATING on
// the source, MIGRATE, SETSLOT NODE on the target, the source, then every
// other master), but one key at a time and pausing step after marking the
// slot and after each key, so that clients meet the slot half moved for
// as long as the test wants: ASK for a key already moved or not yet
// created, TRYAGAIN for a command on two keys of which one has moved. It
// then waits until the cluster is ready.
func (c *Cluster) MoveSlot(tb testing.TB, slot int, to *Node, step time.Duration) {
	tb.Helper()
	ctx := context.Background()
	from := c.SlotOwner(tb, slot)
	if from == to {
		return
	}
	do := func(n *Node, args ...any) {
		tb.Helper()
		if err := n.admin.Do(ctx, args...).Err(); err != nil {
			view, _ := n.admin.ClusterNodes(ctx).Result()
			var logs strings.Builder
			for _, m := range c.Nodes {
				log, _ := os.ReadFile(m.Dir + "/redis.log")
				for _, line := range strings.Split(string(log), "\n") {
					if strings.Contains(line, " # ") {
						fmt.Fprintf(&logs, "%s %s\n", m.Addr, line)
					}
				}
			}
			tb.Fatalf("%v on %s (moving slot %d from %s to %s): %v; its view:\n%s\nlogs:\n%s", args, n.Addr, slot, from.Addr, to.Addr, err, view, logs.String())
		}
	}
	do(to, "CLUSTER", "SETSLOT", slot, "IMPORTING", from.ID)
	do(from, "CLUSTER", "SETSLOT", slot, "MIGRATING", to.ID)
	time.Sleep(step)
	host, port, _ := strings.Cut(to.Addr, ":")
	for {
		keys, err := from.admin.ClusterGetKeysInSlot(ctx, slot, 1).Result()
		if err != nil {
			tb.Fatalf("CLUSTER GETKEYSINSLOT %d on %s: %v", slot, from.Addr, err)
		}
		if len(keys) == 0 {
			break
		}
		do(from, "MIGRATE", host, port, "", 0, 5000, "KEYS", keys[0])
		time.Sleep(step)
	}
	// The target first: it then serves the slot without ASKING, and bumps
	// its config epoch so that gossip carries the change; then the source,
	// which from then on answers MOVED; then the others, as a courtesy
	// (redis-cli does the same): a node that does not yet know the target
	// as a master refuses, and learns it from gossip.
	do(to, "CLUSTER", "SETSLOT", slot, "NODE", to.ID)
	// A master that loses its last slot turns into a replica of the node
	// that took it (cluster-allow-replica-migration, on by default), as
	// soon as gossip tells it: it may refuse SETSLOT already.
	if err := from.admin.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", to.ID).Err(); err != nil && !strings.Contains(err.Error(), "only with masters") {
		do(from, "CLUSTER", "SETSLOT", slot, "NODE", to.ID)
	}
	for _, m := range c.Masters(tb) {
		if m != to && m != from {
			_ = m.admin.Do(ctx, "CLUSTER", "SETSLOT", slot, "NODE", to.ID).Err()
		}
	}
	c.WaitReady(tb)
}
