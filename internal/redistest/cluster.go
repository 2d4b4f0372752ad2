package redistest

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Cluster is a Redis Cluster of throwaway redis-server processes on
// 127.0.0.1, stopped when the test ends.
type Cluster struct {
	// Nodes are in start order: the masters, then the replicas of master
	// 0, of master 1, and so on. Roles change on a failover; ask Masters,
	// SlotOwner, MasterOf or ReplicaOf for the current ones.
	Nodes []*Node
}

// Node is one cluster member.
type Node struct {
	*Server
	// ID is the cluster node id.
	ID string
	// BusPort is the cluster bus port.
	BusPort int
	admin   *redis.Client
}

// Admin returns a plain client to this node alone (no cluster
// redirections), for inspecting and steering it. It is closed at test end.
func (n *Node) Admin() *redis.Client { return n.admin }

// clusterNodeTimeout is the cluster-node-timeout of test clusters: short
// enough for quick failovers, long enough that a loaded test machine does
// not see false failures.
const clusterNodeTimeout = 5000

// StartCluster starts masters masters with replicasPerMaster replicas
// each (random ports for clients and for the cluster bus, which needs
// redis-server 7 or later), assigns the 16384 slots evenly to the masters,
// and waits until every node reports cluster_state:ok, all nodes share one
// view of slot owners and replicas, and every replica is in sync. A new
// cluster takes about 2.5 s: a node refuses to report ok for its first two
// seconds. Every node stops when the test ends.
func StartCluster(tb testing.TB, masters, replicasPerMaster int) *Cluster {
	tb.Helper()
	return StartClusterOf(tb, masters, replicasPerMaster, need(tb))
}

// StartClusterOf is StartCluster with node i running servers[i %
// len(servers)] (binary paths): a cluster of mixed builds, as during a
// rolling upgrade. The masters are nodes 0 to masters-1.
func StartClusterOf(tb testing.TB, masters, replicasPerMaster int, servers ...string) *Cluster {
	tb.Helper()
	if len(servers) == 0 {
		tb.Fatalf("StartClusterOf: no server binary")
	}
	if masters < 1 || replicasPerMaster < 0 {
		tb.Fatalf("StartCluster(%d, %d): need at least one master", masters, replicasPerMaster)
	}
	c := &Cluster{}
	total := masters * (1 + replicasPerMaster)
	for i := 0; i < total; i++ {
		c.Nodes = append(c.Nodes, startClusterNode(tb, servers[i%len(servers)]))
	}
	ctx := context.Background()
	for _, n := range c.Nodes {
		id, err := n.admin.Do(ctx, "CLUSTER", "MYID").Text()
		if err != nil {
			tb.Fatalf("cluster myid on %s: %v", n.Addr, err)
		}
		n.ID = id
	}
	// Slots first, each master with its own config epoch, so that the
	// nodes agree at once without epoch collision handling.
	for i := 0; i < masters; i++ {
		n := c.Nodes[i]
		lo, hi := i*16384/masters, (i+1)*16384/masters-1
		if err := n.admin.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			tb.Fatalf("cluster set-config-epoch on %s: %v", n.Addr, err)
		}
		if err := n.admin.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			tb.Fatalf("cluster addslotsrange %d %d on %s: %v", lo, hi, n.Addr, err)
		}
	}
	// Every node meets every other: gossip alone would take seconds.
	for i, a := range c.Nodes {
		for _, b := range c.Nodes[i+1:] {
			if err := a.admin.Do(ctx, "CLUSTER", "MEET", "127.0.0.1", b.Port, b.BusPort).Err(); err != nil {
				tb.Fatalf("cluster meet %s -> %s: %v", a.Addr, b.Addr, err)
			}
		}
	}
	waitUntil(tb, 10*time.Second, "every node to know every other", func() error {
		for _, n := range c.Nodes {
			lines, err := clusterNodes(ctx, n.admin)
			if err != nil {
				return err
			}
			if len(lines) != total {
				return fmt.Errorf("%s knows %d of %d nodes", n.Addr, len(lines), total)
			}
			for _, l := range lines {
				if l.has("handshake") || l.has("noaddr") {
					return fmt.Errorf("%s: node %s is in %s", n.Addr, l.id, l.flags)
				}
			}
		}
		return nil
	})
	for r := 0; r < replicasPerMaster; r++ {
		for m := 0; m < masters; m++ {
			rep := c.Nodes[masters+m*replicasPerMaster+r]
			if err := rep.admin.Do(ctx, "CLUSTER", "REPLICATE", c.Nodes[m].ID).Err(); err != nil {
				tb.Fatalf("cluster replicate on %s: %v", rep.Addr, err)
			}
		}
	}
	c.WaitReady(tb)
	return c
}

func startClusterNode(tb testing.TB, path string) *Node {
	tb.Helper()
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		ports, err := freePorts(2)
		if err != nil {
			tb.Fatalf("finding free ports: %v", err)
		}
		dir := tb.TempDir()
		addr := fmt.Sprintf("127.0.0.1:%d", ports[0])
		args := append(baseArgs(ports[0], dir),
			"--cluster-enabled", "yes",
			"--cluster-config-file", dir+"/nodes.conf",
			"--cluster-port", strconv.Itoa(ports[1]),
			"--cluster-node-timeout", strconv.Itoa(clusterNodeTimeout),
		)
		s, err := launch(path, dir, addr, ports[0], args, func() error { return rawPing(addr) })
		if err != nil {
			lastErr = err
			continue
		}
		tb.Cleanup(s.Stop)
		n := &Node{Server: s, BusPort: ports[1], admin: redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})}
		tb.Cleanup(func() { n.admin.Close() })
		return n
	}
	tb.Fatalf("starting a cluster node: %v", lastErr)
	return nil
}

// Addrs returns every node's address, masters first.
func (c *Cluster) Addrs() []string {
	var a []string
	for _, n := range c.Nodes {
		a = append(a, n.Addr)
	}
	return a
}

// Client returns a new cluster client seeded with every node, honouring
// context deadlines; it is closed at the end of the test.
func (c *Cluster) Client(tb testing.TB) *redis.ClusterClient {
	tb.Helper()
	cl := redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs(), ContextTimeoutEnabled: true})
	tb.Cleanup(func() { cl.Close() })
	return cl
}

// KeySlot returns the cluster slot of key, as the server computes it.
func (c *Cluster) KeySlot(tb testing.TB, key string) int {
	tb.Helper()
	slot, err := c.Nodes[0].admin.ClusterKeySlot(context.Background(), key).Result()
	if err != nil {
		tb.Fatalf("cluster keyslot: %v", err)
	}
	return int(slot)
}

// SlotOwner returns the master that serves slot, by that master's own
// account (the node whose "myself" entry is a master holding the slot).
func (c *Cluster) SlotOwner(tb testing.TB, slot int) *Node {
	tb.Helper()
	n, err := c.slotOwner(context.Background(), slot)
	if err != nil {
		tb.Fatal(err)
	}
	return n
}

func (c *Cluster) slotOwner(ctx context.Context, slot int) (*Node, error) {
	for _, n := range c.Nodes {
		me, err := myself(ctx, n.admin)
		if err != nil {
			return nil, err
		}
		if me.has("master") && me.owns(slot) {
			return n, nil
		}
	}
	return nil, fmt.Errorf("no master claims slot %d", slot)
}

// MasterOf returns the master that serves key.
func (c *Cluster) MasterOf(tb testing.TB, key string) *Node {
	tb.Helper()
	return c.SlotOwner(tb, c.KeySlot(tb, key))
}

// Masters returns the nodes that are masters now.
func (c *Cluster) Masters(tb testing.TB) []*Node {
	tb.Helper()
	var ms []*Node
	for _, n := range c.Nodes {
		me, err := myself(context.Background(), n.admin)
		if err != nil {
			tb.Fatal(err)
		}
		if me.has("master") {
			ms = append(ms, n)
		}
	}
	return ms
}

// ReplicaOf returns a replica of the master m, or nil.
func (c *Cluster) ReplicaOf(tb testing.TB, m *Node) *Node {
	tb.Helper()
	for _, n := range c.Nodes {
		me, err := myself(context.Background(), n.admin)
		if err != nil {
			tb.Fatal(err)
		}
		if me.has("slave") && me.master == m.ID {
			return n
		}
	}
	return nil
}

// Failover runs CLUSTER FAILOVER (the coordinated, manual kind: the master
// stops taking writes until the replica has caught up, so acknowledged
// writes survive) on a replica of the master that owns slot, then waits
// until every node agrees that the replica owns it and the cluster is ready
// again. It returns the old and the new master and how long the switch
// took, from the command to the new master claiming the slot.
func (c *Cluster) Failover(tb testing.TB, slot int) (old, promoted *Node, took time.Duration) {
	tb.Helper()
	return c.FailoverWith(tb, slot, "")
}

// FailoverWith is Failover with an option of CLUSTER FAILOVER: "" for the
// coordinated kind, "FORCE" (no handshake with the master: writes it
// acknowledged but had not yet replicated are lost) or "TAKEOVER" (no
// election either).
func (c *Cluster) FailoverWith(tb testing.TB, slot int, option string) (old, promoted *Node, took time.Duration) {
	tb.Helper()
	old = c.SlotOwner(tb, slot)
	promoted = c.ReplicaOf(tb, old)
	if promoted == nil {
		tb.Fatalf("failover of slot %d: master %s has no replica", slot, old.Addr)
	}
	ctx := context.Background()
	start := time.Now()
	args := []any{"CLUSTER", "FAILOVER"}
	if option != "" {
		args = append(args, option)
	}
	if err := promoted.admin.Do(ctx, args...).Err(); err != nil {
		tb.Fatalf("cluster failover %s on %s: %v", option, promoted.Addr, err)
	}
	defer func() {
		if tb.Failed() {
			for _, n := range []*Node{old, promoted} {
				log, _ := os.ReadFile(n.Dir + "/redis.log")
				tb.Logf("log of %s:\n%s", n.Addr, log)
			}
		}
	}()
	waitUntil(tb, 15*time.Second, "the replica to take over", func() error {
		me, err := myself(ctx, promoted.admin)
		if err != nil {
			return err
		}
		if !me.has("master") || !me.owns(slot) {
			return fmt.Errorf("%s is still %s", promoted.Addr, me.flags)
		}
		return nil
	})
	took = time.Since(start)
	c.WaitReady(tb)
	return old, promoted, took
}

// WaitReady waits until every node reports cluster_state:ok, every node
// has the same view of slot owners and replicas with no node looking down,
// and every replica's link to its master is up and not syncing.
func (c *Cluster) WaitReady(tb testing.TB) {
	tb.Helper()
	ctx := context.Background()
	waitUntil(tb, 20*time.Second, "the cluster to be ready", func() error {
		var view string
		for _, n := range c.Nodes {
			info, err := n.admin.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("%s: cluster state not ok", n.Addr)
			}
			lines, err := clusterNodes(ctx, n.admin)
			if err != nil {
				return err
			}
			v := slotView(lines)
			if view == "" {
				view = v
			} else if v != view {
				return fmt.Errorf("%s sees slots as %s, another node as %s", n.Addr, v, view)
			}
			me := lines.myself()
			if me.has("slave") {
				repl, err := n.admin.Info(ctx, "replication").Result()
				if err != nil {
					return err
				}
				if !strings.Contains(repl, "master_link_status:up") || !strings.Contains(repl, "master_sync_in_progress:0") {
					return fmt.Errorf("replica %s is not in sync", n.Addr)
				}
			}
		}
		return nil
	})
}

// nodeLine is one line of CLUSTER NODES.
type nodeLine struct {
	id, addr, flags, master string
	slots                   [][2]int
}

type nodeLines []nodeLine

func (l nodeLine) has(flag string) bool {
	for _, f := range strings.Split(l.flags, ",") {
		if f == flag {
			return true
		}
	}
	return false
}

func (l nodeLine) owns(slot int) bool {
	for _, r := range l.slots {
		if r[0] <= slot && slot <= r[1] {
			return true
		}
	}
	return false
}

func (ls nodeLines) myself() nodeLine {
	for _, l := range ls {
		if l.has("myself") {
			return l
		}
	}
	return nodeLine{}
}

func clusterNodes(ctx context.Context, c *redis.Client) (nodeLines, error) {
	text, err := c.ClusterNodes(ctx).Result()
	if err != nil {
		return nil, err
	}
	var out nodeLines
	for _, line := range strings.Split(strings.TrimSpace(text), "\n") {
		f := strings.Fields(line)
		if len(f) < 8 {
			continue
		}
		l := nodeLine{id: f[0], addr: f[1], flags: f[2], master: f[3]}
		for _, s := range f[8:] {
			if strings.HasPrefix(s, "[") {
				continue // a slot being migrated or imported
			}
			lo, hi, found := strings.Cut(s, "-")
			a, err1 := strconv.Atoi(lo)
			b := a
			var err2 error
			if found {
				b, err2 = strconv.Atoi(hi)
			}
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("parsing CLUSTER NODES slot %q", s)
			}
			l.slots = append(l.slots, [2]int{a, b})
		}
		out = append(out, l)
	}
	return out, nil
}

func myself(ctx context.Context, c *redis.Client) (nodeLine, error) {
	ls, err := clusterNodes(ctx, c)
	if err != nil {
		return nodeLine{}, err
	}
	me := ls.myself()
	if me.id == "" {
		return me, fmt.Errorf("CLUSTER NODES on %s has no myself entry", c.Options().Addr)
	}
	return me, nil
}

// slotView summarises a node's view of the cluster (which master owns each
// slot range, which master each replica follows, which nodes look down), for
// comparing two nodes' views: a master ignores a manual failover request
// from a replica it does not yet know as its own.
func slotView(ls nodeLines) string {
	var parts []string
	for _, l := range ls {
		switch {
		case l.has("fail") || l.has("fail?"):
			parts = append(parts, l.id+" failing")
		case l.has("slave"):
			parts = append(parts, l.id+" replicates "+l.master)
		case l.has("master"):
			for _, r := range l.slots {
				parts = append(parts, fmt.Sprintf("%05d-%05d=%s", r[0], r[1], l.id))
			}
		}
	}
	sort.Strings(parts)
	return strings.Join(parts, " ")
}
