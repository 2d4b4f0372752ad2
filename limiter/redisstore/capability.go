package redisstore

import (
	"context"
	"errors"
	"net"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file finds out, node by node, how the writes of decisions made in Go
// reach Redis: with SET … IFEQ (a native compare-and-set of one key, in
// Valkey 8.1 and Redis 8.4), or through lua/commit.lua. Only the speed
// depends on the answer: a node taken for native that is not (a failover
// to an older replica) refuses the SET with a syntax error, having written
// nothing, and its decisions go to the script; a node taken for the script
// is written by commit.lua, which every server runs.

// WritePath is how a Redis node takes the writes of decisions made in Go.
type WritePath string

const (
	// WriteUnknown: the node has not answered yet (the store asks it the
	// first time it writes there, and again until it answers); the script
	// meanwhile.
	WriteUnknown WritePath = "unknown"
	// WriteScript: a compare-and-set in Lua (lua/commit.lua), or no
	// decision in Go at all (ScriptOnly).
	WriteScript WritePath = "script"
	// WriteNative: SET key new IFEQ old PX ttl (SET key new NX PX ttl for a
	// key that did not exist at the read), pipelined, for the keys that no
	// other key of the same decisions shares a write with; commit.lua for
	// the rest.
	WriteNative WritePath = "native"
)

// NodeWritePath is the write path of one node.
type NodeWritePath struct {
	// Node is the node's address (host:port), as the client dials it; for a
	// client that does not say (a Sentinel or wrapped client), "standalone".
	Node string
	Path WritePath
	// Reason says why, for the log: what the node answered, or that the
	// store was told not to write natively.
	Reason string
	// Since is when the node was found on this path.
	Since time.Time
}

// capRecheck is how often a node's path is asked again: a node upgraded in
// place (restarted on the same address with a newer build) or a failover
// to one changes it, and the store should follow without a restart. The
// question rides on no decision: it goes on its own, in the background.
const capRecheck = time.Minute

// capRetry is how soon a node that could not be asked (down, timed out)
// is asked again.
const capRetry = 5 * time.Second

// writePaths is the store's table of node write paths.
type writePaths struct {
	mu     sync.Mutex
	nodes  map[string]*nodePath
	now    func() time.Time
	off    string // non-empty: native writes are turned off, and why
	notify func(NodeWritePath)
	closed bool
	probes sync.WaitGroup
	// timeout bounds one question: the store's timeout, as the first is
	// asked on a decision's time.
	timeout time.Duration
}

type nodePath struct {
	NodeWritePath
	next    time.Time // when to ask again
	probing bool
}

func newWritePaths(now func() time.Time, timeout time.Duration, off string, notify func(NodeWritePath)) *writePaths {
	return &writePaths{nodes: map[string]*nodePath{}, now: now, timeout: timeout, off: off, notify: notify}
}

// asker asks one node for the reply of COMMAND DOCS SET.
type asker func(ctx context.Context) (any, error)

// native reports whether node takes native writes now. The first time
// the store meets a node it asks it (ask); with wait it waits for the
// answer (one round trip, once: the store's first write there already
// takes the right path), else it asks in the background. After that a
// node due to be asked again (see capRecheck, capRetry) is asked in the
// background, its last known path holding until it answers; a node that
// has not answered yet is taken for the script.
func (w *writePaths) native(node string, ask asker, wait bool) bool {
	if w.off != "" {
		w.noteOff(node)
		return false
	}
	w.mu.Lock()
	n := w.nodes[node]
	first := n == nil && !w.closed
	if n == nil {
		n = &nodePath{NodeWritePath: NodeWritePath{Node: node, Path: WriteUnknown}}
		w.nodes[node] = n
	}
	later := !n.probing && !w.closed && !w.now().Before(n.next)
	if first && wait {
		later = false
	}
	if first || later {
		n.probing = true
	}
	if later {
		w.probes.Add(1)
	}
	native := n.Path == WriteNative
	w.mu.Unlock()
	switch {
	case first && wait:
		return w.ask(node, ask).Path == WriteNative
	case later:
		go func() {
			defer w.probes.Done()
			w.ask(node, ask)
		}()
	}
	return native
}

// ask asks node now and records the answer.
func (w *writePaths) ask(node string, ask asker) NodeWritePath {
	ctx, cancel := context.WithTimeout(context.Background(), w.timeout)
	reply, err := ask(ctx)
	cancel()
	path, reason := judgeDocs(reply, err)
	w.mu.Lock()
	n := w.nodes[node]
	if n == nil {
		n = &nodePath{NodeWritePath: NodeWritePath{Node: node, Path: WriteUnknown}}
		w.nodes[node] = n
	}
	n.probing = false
	if path == WriteUnknown {
		// Not answered: keep what was known, ask again soon.
		n.next = w.now().Add(capRetry)
		if n.Path == WriteUnknown {
			n.Reason = reason
		}
		out := n.NodeWritePath
		w.mu.Unlock()
		return out
	}
	n.next = w.now().Add(capRecheck)
	changed := n.Path != path
	if changed {
		n.Path, n.Reason, n.Since = path, reason, w.now()
	}
	out := n.NodeWritePath
	w.mu.Unlock()
	if changed && w.notify != nil {
		w.notify(out)
	}
	return out
}

// demote puts node on the script path at once: a native write was refused
// as a command the node does not know (it wrote nothing). It is asked
// again at the next recheck.
func (w *writePaths) demote(node, reason string) {
	w.mu.Lock()
	n := w.nodes[node]
	if n == nil || n.Path == WriteScript {
		w.mu.Unlock()
		return
	}
	n.Path, n.Reason, n.Since = WriteScript, reason, w.now()
	n.next = w.now().Add(capRecheck)
	out := n.NodeWritePath
	w.mu.Unlock()
	if w.notify != nil {
		w.notify(out)
	}
}

// noteOff records node as on the script path because native writes are
// turned off, once, so that WritePaths lists it and the log says why.
func (w *writePaths) noteOff(node string) {
	w.mu.Lock()
	if _, ok := w.nodes[node]; ok {
		w.mu.Unlock()
		return
	}
	n := &nodePath{NodeWritePath: NodeWritePath{Node: node, Path: WriteScript, Reason: w.off, Since: w.now()}}
	w.nodes[node] = n
	out := n.NodeWritePath
	w.mu.Unlock()
	if w.notify != nil {
		w.notify(out)
	}
}

// list returns every node's path, by address.
func (w *writePaths) list() []NodeWritePath {
	w.mu.Lock()
	out := make([]NodeWritePath, 0, len(w.nodes))
	for _, n := range w.nodes {
		out = append(out, n.NodeWritePath)
	}
	w.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// close stops new questions and waits for those asked.
func (w *writePaths) close() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.probes.Wait()
}

// judgeDocs reads a node's answer to COMMAND DOCS SET: native when SET
// documents an IFEQ argument (the feature, not a version number: Valkey
// reports redis_version 7.2.4, and other forks may add it too); the script
// when the node answered without one, or refused the question (a server
// before Redis 7.0 has no COMMAND DOCS; an ACL may refuse it); unknown when
// there was no answer.
func judgeDocs(reply any, err error) (WritePath, string) {
	if err != nil {
		var rerr redis.Error
		if errors.As(err, &rerr) && !isNetError(err) {
			return WriteScript, "COMMAND DOCS SET refused (" + err.Error() + "): taken for a server without SET IFEQ"
		}
		return WriteUnknown, "no answer to COMMAND DOCS SET: " + err.Error()
	}
	if mentionsToken(reply, "IFEQ") {
		return WriteNative, "SET IFEQ found (COMMAND DOCS SET)"
	}
	return WriteScript, "SET has no IFEQ on this server (COMMAND DOCS SET)"
}

func isNetError(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// mentionsToken reports whether a RESP2 or RESP3 reply holds the string
// token anywhere (COMMAND DOCS nests arguments in arrays or maps).
func mentionsToken(v any, token string) bool {
	switch v := v.(type) {
	case string:
		return strings.EqualFold(v, token)
	case []any:
		for _, x := range v {
			if mentionsToken(x, token) {
				return true
			}
		}
	case map[any]any:
		for k, x := range v {
			if mentionsToken(k, token) || mentionsToken(x, token) {
				return true
			}
		}
	case map[string]any:
		for k, x := range v {
			if strings.EqualFold(k, token) || mentionsToken(x, token) {
				return true
			}
		}
	}
	return false
}

// askDocs asks through c (one pipelined command: the Client interface has
// no Do).
func askDocs(c interface {
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}) asker {
	return func(ctx context.Context) (any, error) {
		var cmd *redis.Cmd
		_, err := c.Pipelined(ctx, func(p redis.Pipeliner) error {
			cmd = p.Do(ctx, "command", "docs", "set")
			return nil
		})
		if cmd != nil && cmd.Err() == nil {
			return cmd.Val(), nil
		}
		if cmd != nil && cmd.Err() != nil {
			return nil, cmd.Err()
		}
		return nil, err
	}
}

// standaloneNode names the one node of a client that is not a cluster's.
func standaloneNode(c Client) string {
	if o, ok := c.(interface{ Options() *redis.Options }); ok {
		if addr := o.Options().Addr; addr != "" && addr != "FailoverClient" {
			return addr
		}
	}
	return "standalone"
}

// WritePaths returns the write path of every node this store has written
// to or been asked about (DetectWritePaths), by address: which write the
// decisions made in Go use there (on a cluster, those whose keys share a
// hash tag). A node is asked again every minute, so an upgrade in place
// shows within one.
func (s *Store) WritePaths() []NodeWritePath { return s.caps.list() }

// DetectWritePaths asks every node now (off a cluster the one, on a
// cluster every master) and returns the paths, as WritePaths does after.
// The store asks by itself the first time it writes to a node, in the
// background; this is for a caller that wants the answer at start, and
// for tests. The error is that of the first node that could not be asked.
func (s *Store) DetectWritePaths(ctx context.Context) ([]NodeWritePath, error) {
	var mu sync.Mutex
	var firstErr error
	check := func(node string, ask asker) {
		if s.caps.off != "" {
			s.caps.noteOff(node)
			return
		}
		if p := s.caps.ask(node, ask); p.Path == WriteUnknown {
			mu.Lock()
			firstErr = cmpErr(firstErr, classify(errors.New(p.Reason)))
			mu.Unlock()
		}
	}
	if !s.cluster {
		check(s.node, askDocs(s.client))
		return s.caps.list(), firstErr
	}
	fm, ok := s.client.(interface {
		ForEachMaster(ctx context.Context, fn func(ctx context.Context, client *redis.Client) error) error
	})
	if !ok {
		return s.caps.list(), nil // a wrapped cluster client: batches stay in the script
	}
	err := fm.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		check(m.Options().Addr, askDocs(m))
		return nil
	})
	if err != nil {
		firstErr = cmpErr(firstErr, classify(err))
	}
	return s.caps.list(), firstErr
}

// nativeOff says why a store never writes natively, or "" when it may.
func nativeOff(opts Options) string {
	switch {
	case opts.ScriptOnly:
		return "script_only: every decision is made in freqcap.lua"
	case opts.NoNativeWrite:
		return "native writes turned off (native_write off, NoNativeWrite): commit.lua"
	}
	return ""
}
