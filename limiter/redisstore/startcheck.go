package redisstore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/lua"
)

// This file checks, once when a gateway starts, what the Redis behind a
// store will let it do, so that a misconfiguration shows in the log at
// start instead of as failures at the first send: whether each node
// answers, whether the user may run every command the store sends (on
// keys of its prefix), and whether the node's eviction policy may evict
// counts. The store works without it; nothing here changes a decision.

var startCheckScript = redis.NewScript(lua.StartCheck)

// StartCheck is what CheckStart found.
type StartCheck struct {
	// Err is set when the store could not be asked at all: no node
	// answered (down, a wrong address, a refused password), or a cluster's
	// slot map could not be read. A refused login or command is a
	// configuration error (Refusals); anything else is an outage, and
	// decisions go to on_error until the store answers.
	Err error
	// Nodes are the nodes asked: the server (the master, under Sentinel),
	// or every master of a cluster.
	Nodes []NodeCheck
}

// NodeCheck is what one node answered.
type NodeCheck struct {
	// Node is the node's address as the client dials it ("sentinel" for
	// the master a Sentinel client follows).
	Node string
	// Sentinel is set for a sentinel itself (Config.CheckSentinels);
	// Server then names the master it watches.
	Sentinel bool
	// Err is why the node could not be asked.
	Err error
	// Refused lists what the store needs that the user may not do.
	Refused []Refusal
	// Server is the server's name and version ("redis 7.0.15", "valkey
	// 8.1.1"); "" when INFO is refused.
	Server string
	// EvictionPolicy is the node's maxmemory-policy; "" when it could not
	// be read (PolicyErr says why: INFO and CONFIG GET are refused to a
	// least-privilege user).
	EvictionPolicy string
	// MaxMemory is the node's maxmemory in bytes (0: no limit), when read.
	MaxMemory int64
	PolicyErr error
	// NoAppendOnly is set when INFO says the node keeps no append-only
	// file: a restart then loses the counts written since its last
	// snapshot, all of them without snapshots (whether it takes any, INFO
	// does not say).
	NoAppendOnly bool
	// Replicas is how many replicas INFO says are connected to the node.
	Replicas int
	// WritesRefused is the node's refusal of a write for its state, not
	// for the user: OOM (at maxmemory under noeviction), MISCONF (a
	// snapshot that fails) or NOREPLICAS (min-replicas-to-write, with
	// replicas down or lagging). It mends once the server's operator frees
	// memory, fixes the disk or the replicas catch up, so it does not stop
	// a load; decisions go to on_error until then.
	WritesRefused error
	// SpeaksTLS is set on a node that could not be asked and completes
	// a TLS handshake, the store connecting without TLS
	// (Config.MarkTLSServers).
	SpeaksTLS bool
	// mode is INFO's redis_mode (Valkey's server_mode): standalone,
	// cluster or sentinel, when read.
	mode string
	// role is INFO's role: master or slave, when read.
	role string
}

// Refusal is one command the store needs that the user may not run.
type Refusal struct {
	// Command is the command as Redis names it: "evalsha", "get",
	// "cluster|slots".
	Command string
	// InScript is set for a call the store's scripts make (redis.call),
	// which Redis checks against the user as if it were sent directly.
	InScript bool
	// Keys is the key pattern the store needs the command on
	// ("freqcap:*"), or "" for a command without keys.
	Keys string
	// Reason is what the server answered.
	Reason string
	// Kind tells what mends it.
	Kind RefusalKind
}

// RefusalKind tells what mends a refusal, for the message that says so.
type RefusalKind int

const (
	// RefusedByACL is a command or key the user may not have: grant it.
	RefusedByACL RefusalKind = iota
	// RefusedDB is a db setting that names a database the server does not
	// have.
	RefusedDB
	// RefusedReplica is a server that is a replica: a read-only one
	// refuses every write the store makes, however long one waits, unless
	// it is promoted; a writable one (replica-read-only no) takes them,
	// and replication from its master overwrites them.
	RefusedReplica
	// RefusedUnknownCommand is a command the server does not know under
	// its own name: disabled or renamed (rename-command), as managed
	// services do with some. No user's permission mends it.
	RefusedUnknownCommand
	// RefusedClusterNode is a node of a Redis Cluster reached as one
	// server: a key on another master answers MOVED.
	RefusedClusterNode
	// RefusedNotCluster is a server without cluster support reached as a
	// cluster.
	RefusedNotCluster
	// RefusedSentinelServer is a Sentinel reached as a data server.
	RefusedSentinelServer
	// RefusedNotSentinel is a server reached as a Sentinel that is none.
	RefusedNotSentinel
	// RefusedUnknownMaster is a sentinel_master that no sentinel watches.
	RefusedUnknownMaster
)

// Fix says what mends a refusal of this kind.
func (k RefusalKind) Fix() string {
	switch k {
	case RefusedDB:
		return "set db to a database the server has, below its databases setting"
	case RefusedReplica:
		return "point the store at the master, not a replica, or name the master with sentinel_master"
	case RefusedUnknownCommand:
		return "give the server the command under its own name (remove its rename-command), or use a server that offers it: docs/operations.md lists under Least privilege what the store sends"
	case RefusedClusterNode:
		return "add cluster to the redis settings, with the cluster's nodes as addresses"
	case RefusedNotCluster:
		return "remove cluster: the server is a single one (or give the addresses of a cluster's nodes)"
	case RefusedSentinelServer:
		return "name the master with sentinel_master, and give the sentinels as addresses"
	case RefusedNotSentinel:
		return "remove sentinel_master, or give the sentinels' addresses"
	case RefusedUnknownMaster:
		return "set sentinel_master to a master the sentinels watch (SENTINEL MASTERS lists them)"
	}
	return "grant the user what the store needs, as docs/operations.md lists under Least privilege"
}

// wrongKind reports whether the refusal is of a server of another kind
// than the settings say (a cluster node, a sentinel, ...).
func (k RefusalKind) wrongKind() bool { return k >= RefusedClusterNode }

// writeRefusedForState reports whether a server's answer refuses a write
// for the server's state (OOM, MISCONF, or NOREPLICAS: fewer replicas in
// reach than min-replicas-to-write asks) rather than for the user.
func writeRefusedForState(msg string) bool {
	return outOfMemory(msg) || strings.HasPrefix(msg, "MISCONF ") || strings.HasPrefix(msg, "NOREPLICAS ")
}

// notServing reports whether err is a server's refusal of a command for a
// state it leaves by itself: LOADING (reading its data at start),
// CLUSTERDOWN (a cluster missing a slot's master), TRYAGAIN (a slot half
// moved), BUSY (a script running past its time limit).
func notServing(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	for _, code := range []string{"LOADING ", "CLUSTERDOWN ", "TRYAGAIN ", "BUSY "} {
		if strings.HasPrefix(msg, code) {
			return true
		}
	}
	return false
}

// unknownInScript reports whether a script's call failed on a command the
// server does not know (renamed or disabled): Redis says "Unknown Redis
// command called from script", Valkey 8.0 "Unknown command called from
// script".
func unknownInScript(msg string) bool {
	return strings.Contains(msg, "command called from script") && strings.Contains(msg, "Unknown ")
}

// readOnlyReplica reports whether a server's answer is a replica's
// refusal of a write: READONLY, or MASTERDOWN from one that serves
// nothing while its master is down (replica-serve-stale-data no).
func readOnlyReplica(msg string) bool {
	return strings.HasPrefix(msg, "READONLY ") || strings.HasPrefix(msg, "MASTERDOWN ")
}

func (r Refusal) String() string {
	where := ""
	if r.InScript {
		where = " (inside the store's scripts)"
	}
	if r.Keys != "" {
		return fmt.Sprintf("%s on keys %s%s: %s", r.Command, r.Keys, where, r.Reason)
	}
	return fmt.Sprintf("%s%s: %s", r.Command, where, r.Reason)
}

// EvictsCounts reports whether a node whose maxmemory-policy is policy
// may evict the store's keys when it reaches maxmemory. Every key the
// store writes has a TTL (it expires once its records have left every
// window), so the volatile-* policies evict them as readily as the
// allkeys-* ones, and an evicted recipient loses its history: its caps
// start again from zero. Only noeviction keeps every count, refusing
// writes instead (the decisions then go to on_error). An empty (unknown)
// policy reports false.
func EvictsCounts(policy string) bool {
	return policy != "" && policy != "noeviction"
}

// CheckStart asks the store's Redis what a gateway needs to know at start
// (see StartCheck). It sends a few commands to each node (one pipeline:
// TIME, MGET, ASKING on a cluster, the probe script by EVAL and EVALSHA,
// INFO, CONFIG GET), on
// one probe key per node that no rule can name, which it leaves behind
// for at most a second. ctx bounds the whole check.
func (s *Store) CheckStart(ctx context.Context) StartCheck {
	if !s.cluster {
		p, ok := s.client.(pipeliner)
		if !ok {
			return StartCheck{Err: errors.New("the client cannot pipeline")}
		}
		nc := s.checkNode(ctx, nodeName(s.client), p, s.probeKey("0"))
		check := StartCheck{Nodes: []NodeCheck{nc}}
		if nc.Err != nil {
			check.Err = nc.Err
		}
		return check
	}
	cc, ok := s.client.(clusterMasters)
	if !ok {
		return StartCheck{Err: errors.New("the cluster client cannot name its masters")}
	}
	var mu sync.Mutex
	var check StartCheck
	err := cc.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		key, err := s.probeKeyOn(ctx, cc, m.Options().Addr)
		var nc NodeCheck
		if err != nil {
			nc = NodeCheck{Node: m.Options().Addr, Err: err}
		} else {
			nc = s.checkNode(ctx, m.Options().Addr, m, key)
		}
		mu.Lock()
		check.Nodes = append(check.Nodes, nc)
		mu.Unlock()
		return nil
	})
	if err != nil {
		check.Err = fmt.Errorf("reading the cluster's slot map: %w", err)
		switch {
		case IsPermissionRefusal(err):
			check.Nodes = append(check.Nodes, NodeCheck{Node: "cluster", Refused: []Refusal{{Command: "cluster|slots", Reason: err.Error()}}})
		case strings.Contains(err.Error(), "unknown command"):
			// CLUSTER renamed or disabled: no wait mends it.
			check.Nodes = append(check.Nodes, NodeCheck{Node: "cluster", Refused: []Refusal{{Command: "cluster|slots", Reason: err.Error(), Kind: RefusedUnknownCommand}}})
		case strings.Contains(err.Error(), "cluster support disabled"):
			check.Nodes = append(check.Nodes, NodeCheck{Node: "cluster", Refused: []Refusal{{Command: "cluster|slots", Reason: err.Error(), Kind: RefusedNotCluster}}})
		}
		return check
	}
	if len(check.Nodes) == 0 {
		check.Err = errors.New("the cluster has no master serving slots")
	}
	for _, nc := range check.Nodes {
		if nc.Err == nil {
			return check
		}
	}
	if check.Err == nil && len(check.Nodes) > 0 {
		check.Err = check.Nodes[0].Err
	}
	return check
}

// pipeliner is a client that sends commands in a pipeline.
type pipeliner interface {
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

// clusterMasters is a cluster client that reaches each master and names
// the master of a key, as *redis.ClusterClient does.
type clusterMasters interface {
	ForEachMaster(ctx context.Context, fn func(ctx context.Context, client *redis.Client) error) error
	MasterForKey(ctx context.Context, key string) (*redis.Client, error)
}

// probeKey is the key the check writes: in the store's prefix, which the
// user's key pattern must cover, with a character ('!') that no dimension
// name has, so no rule's key can be it.
func (s *Store) probeKey(tag string) string {
	return s.opts.Prefix + "!startcheck{" + tag + "}"
}

// probeKeyOn finds a probe key that the master at addr serves.
func (s *Store) probeKeyOn(ctx context.Context, cc clusterMasters, addr string) (string, error) {
	for i := 0; i < 1<<16; i++ {
		key := s.probeKey(strconv.Itoa(i))
		m, err := cc.MasterForKey(ctx, key)
		if err != nil {
			return "", err
		}
		if m.Options().Addr == addr {
			return key, nil
		}
	}
	return "", fmt.Errorf("no probe key found on %s", addr)
}

// nodeName is the address a client dials, or "sentinel" for a client that
// follows the master Sentinel names.
func nodeName(c any) string {
	if o, ok := c.(interface{ Options() *redis.Options }); ok {
		if addr := o.Options().Addr; addr != "" && addr != "FailoverClient" {
			return addr
		}
	}
	return sentinelNode
}

// checkNode asks one node, through c, in one pipeline.
func (s *Store) checkNode(ctx context.Context, node string, c pipeliner, key string) NodeCheck {
	nc := NodeCheck{Node: node}
	keys := s.opts.Prefix + "*"
	var tm *redis.TimeCmd
	var mg *redis.SliceCmd
	var ev, evsha, info, conf, asking *redis.Cmd
	_, perr := c.Pipelined(ctx, func(p redis.Pipeliner) error {
		tm = p.Time(ctx)
		mg = p.MGet(ctx, key)
		if s.cluster {
			// What go-redis sends before a command it follows an ASK
			// redirection with, while a slot moves.
			asking = p.Do(ctx, "ASKING")
		}
		ev = p.Eval(ctx, lua.StartCheck, []string{key})
		evsha = p.EvalSha(ctx, startCheckScript.Hash(), []string{key})
		info = p.Do(ctx, "INFO", "server", "memory", "persistence", "replication")
		conf = p.Do(ctx, "CONFIG", "GET", "maxmemory-policy")
		return nil
	})
	// A node that could not be reached (or refused the password) fails
	// every command alike, or only the pipeline: go-redis need not set
	// each command's error when the connection failed before any answer.
	// One that answered fails each command on its own.
	if err := tm.Err(); err != nil && !IsPermissionRefusal(err) {
		if unknownCommand(err) && sentinelMode(info) {
			nc.Refused = []Refusal{{Command: "time", Reason: err.Error() + " (the server is a Sentinel)", Kind: RefusedSentinelServer}}
			return nc
		}
		if !unknownCommand(err) { // a server without TIME answered: refused below
			nc.Err = err
			return nc.setupRefused()
		}
	}
	// A server that answers TIME but is not serving yet (loading its
	// data, a cluster without full coverage, a script busy) refuses the
	// rest for now: an outage, as the runtime takes it, not a refusal.
	for _, err := range []error{mg.Err(), ev.Err(), evsha.Err()} {
		if notServing(err) {
			nc.Err = err
			return nc
		}
	}
	if tm.Err() == nil && tm.Val().IsZero() {
		nc.Err = perr
		if nc.Err == nil {
			nc.Err = errors.New("no answer to TIME")
		}
		return nc.setupRefused()
	}
	refuse := func(cmd string, inScript bool, keyed bool, err error) {
		r := Refusal{Command: cmd, InScript: inScript, Reason: err.Error()}
		if keyed {
			r.Keys = keys
		}
		if unknownCommand(err) || unknownInScript(err.Error()) {
			r.Kind = RefusedUnknownCommand
		}
		nc.Refused = append(nc.Refused, r)
	}
	// refused: the user may not run the command, or the server knows no
	// such command; either fails every decision that sends it.
	refused := func(err error) bool { return IsPermissionRefusal(err) || unknownCommand(err) }
	if err := tm.Err(); err != nil {
		refuse("time", false, false, err)
	}
	if err := mg.Err(); refused(err) {
		refuse("mget", false, true, err)
	}
	if asking != nil && refused(asking.Err()) {
		refuse("asking", false, false, asking.Err())
	}
	if err := evsha.Err(); refused(err) {
		refuse("evalsha", false, true, err)
	}
	// A write refused for the server's state (OOM, MISCONF) is noted, not
	// refused; a replica's READONLY is refused, with its own fix.
	scriptFailed := func(cmd string, reason string) {
		switch {
		case writeRefusedForState(reason):
			if nc.WritesRefused == nil {
				nc.WritesRefused = errors.New(reason)
			}
		case readOnlyReplica(reason):
			nc.Refused = append(nc.Refused, Refusal{Command: cmd, InScript: true, Keys: keys, Reason: reason, Kind: RefusedReplica})
		default:
			refuse(cmd, true, cmd != "time", errors.New(reason))
		}
	}
	if err := ev.Err(); refused(err) {
		refuse("eval", false, true, err)
	} else if err == nil {
		pairs, _ := ev.Val().([]any)
		for i := 0; i+1 < len(pairs); i += 2 {
			cmd, _ := pairs[i].(string)
			reason, _ := pairs[i+1].(string)
			scriptFailed(cmd, reason)
		}
	} else if msg := err.Error(); writeRefusedForState(msg) || readOnlyReplica(msg) {
		scriptFailed("eval", msg)
	} else if !errors.Is(err, redis.Nil) && (s.cluster || !movedAnswer(err)) {
		nc.Refused = append(nc.Refused, Refusal{Command: "eval", Keys: keys, Reason: "the probe script failed: " + err.Error()})
	}
	s.readPolicy(&nc, info, conf)
	if nc.role == "slave" && nc.mode != "cluster" && !slices.ContainsFunc(nc.Refused, func(r Refusal) bool { return r.Kind == RefusedReplica }) {
		// A replica that did not refuse the probe's writes
		// (replica-read-only no): what it counts is not its master's,
		// and replication overwrites it. (A cluster's replica is
		// refused below as a cluster node.)
		nc.Refused = append(nc.Refused, Refusal{Command: "info", Reason: "INFO says role:slave: the server is a replica, whose counts are not its master's and which replication overwrites", Kind: RefusedReplica})
	}
	if !s.cluster && (nc.mode == "cluster" || movedAnswer(mg.Err(), ev.Err(), evsha.Err())) {
		// Keys on other masters answer MOVED: whether the probe key's
		// did is chance, so the mode decides where INFO is allowed.
		nc.Refused = append(nc.Refused, Refusal{Command: "info", Reason: "the server is a node of a Redis Cluster, reached as a single server", Kind: RefusedClusterNode})
	}
	return nc
}

// movedAnswer reports whether any of errs is a cluster's redirection.
func movedAnswer(errs ...error) bool {
	for _, err := range errs {
		if err != nil && (strings.HasPrefix(err.Error(), "MOVED ") || strings.HasPrefix(err.Error(), "ASK ")) {
			return true
		}
	}
	return false
}

// sentinelMode reports whether INFO's answer is a Sentinel's.
func sentinelMode(info *redis.Cmd) bool {
	text, err := info.Text()
	return err == nil && (strings.Contains(text, "redis_mode:sentinel") || strings.Contains(text, "server_mode:sentinel"))
}

// setupRefused returns nc with its error made a refusal when the server
// answered the connection's setup and said no: go-redis sends SELECT (the
// db setting) before any command, and a user who may not run it (NOPERM),
// or a db the server does not have, fails every command for good, as a
// refused login does. Anything else stays an outage.
func (nc NodeCheck) setupRefused() NodeCheck {
	if re := PermissionRefusal(nc.Err); re != nil {
		nc.Refused = []Refusal{{Command: refusedCommand(re.Error()), Reason: re.Error()}}
		nc.Err = nil
		return nc
	}
	for _, re := range serverErrors(nc.Err) {
		if strings.HasPrefix(re.Error(), "ERR DB index is out of range") {
			nc.Refused = []Refusal{{Command: "select", Reason: re.Error() + " (the db setting names a database the server does not have)", Kind: RefusedDB}}
			nc.Err = nil
			return nc
		}
	}
	return nc
}

// refusedCommand is the command a NOPERM answer names ("NOPERM this user
// has no permissions to run the 'select' command"), or "the connection's
// setup" when it names none.
func refusedCommand(msg string) string {
	if _, rest, ok := strings.Cut(msg, "run the '"); ok {
		if cmd, _, ok := strings.Cut(rest, "'"); ok && cmd != "" {
			return cmd
		}
	}
	return "the connection's setup"
}

// readPolicy fills nc's server, eviction policy and maxmemory from INFO,
// or the policy from CONFIG GET when INFO is refused.
func (s *Store) readPolicy(nc *NodeCheck, info, conf *redis.Cmd) {
	nc.MaxMemory = -1
	if text, err := info.Text(); err == nil {
		fields := map[string]string{}
		for _, line := range strings.Split(text, "\n") {
			if k, v, ok := strings.Cut(strings.TrimSpace(line), ":"); ok {
				fields[k] = v
			}
		}
		name, version := "redis", fields["redis_version"]
		if v := fields["valkey_version"]; v != "" {
			name, version = "valkey", v
		}
		if version != "" {
			nc.Server = name + " " + version
		}
		nc.mode = cmp.Or(fields["redis_mode"], fields["server_mode"]) // Valkey names it server_mode
		nc.role = fields["role"]
		nc.NoAppendOnly = fields["aof_enabled"] == "0"
		nc.Replicas, _ = strconv.Atoi(fields["connected_slaves"])
		nc.EvictionPolicy = fields["maxmemory_policy"]
		if n, err := strconv.ParseInt(fields["maxmemory"], 10, 64); err == nil {
			nc.MaxMemory = n
		}
		if nc.EvictionPolicy != "" {
			return
		}
	}
	switch v := conf.Val().(type) {
	case map[any]any:
		nc.EvictionPolicy, _ = v["maxmemory-policy"].(string)
	case []any:
		if len(v) == 2 {
			nc.EvictionPolicy, _ = v[1].(string)
		}
	}
	if nc.EvictionPolicy == "" {
		nc.PolicyErr = fmt.Errorf("INFO: %v; CONFIG GET: %v", info.Err(), conf.Err())
	}
}
