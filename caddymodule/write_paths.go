package caddymodule

import (
	"context"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/freqcap/caddy-freqcap/limiter/redisstore"
)

// This file shows the operator which write each Redis node takes for the
// decisions made in Go (redisstore.WritePath): native, SET … IFEQ where the
// server has it (Valkey 8.1, Redis 8.4), or script, commit.lua elsewhere.
// Only the Redis CPU a decision costs depends on it, so it is a fact to
// see, not an error: logged at start (logWritePaths), logged again when a
// node changes (an upgrade in place, a failover to an older replica), and
// exported as caddy_frequency_cap_store_write_path, read from the stores
// at each scrape so that it can never go stale.

// writePathDesc describes caddy_frequency_cap_store_write_path.
var writePathDesc = prometheus.NewDesc(
	"caddy_frequency_cap_store_write_path",
	"The write each Redis node takes for decisions made in Go, by handler name, node and path: native (SET IFEQ, Valkey 8.1 and Redis 8.4), script (lua/commit.lua) or unknown (not asked yet); always 1, one series a node.",
	[]string{"handler", "node", "path"}, nil)

// writePathCollector reads the write paths of every pooled Redis store
// when scraped.
type writePathCollector struct{}

// writePaths is the one collector, registered in each config's registry.
var writePaths prometheus.Collector = writePathCollector{}

func (writePathCollector) Describe(ch chan<- *prometheus.Desc) { ch <- writePathDesc }

func (writePathCollector) Collect(ch chan<- prometheus.Metric) {
	// Two stores may reach one node under one handler name (two cap sets
	// of that name with other key prefixes; the old and new config during
	// a reload): a registry refuses a series collected twice, and with it
	// the whole scrape.
	sent := map[[3]string]bool{}
	stores.Range(func(_, value any) bool {
		p := value.(*pooledStore)
		s, ok := p.store.(*redisstore.Store)
		if !ok {
			return true
		}
		paths := s.WritePaths()
		for _, handler := range p.userNames() {
			for _, n := range paths {
				key := [3]string{handler, n.Node, string(n.Path)}
				if !sent[key] {
					sent[key] = true
					ch <- prometheus.MustNewConstMetric(writePathDesc, prometheus.GaugeValue, 1, handler, n.Node, string(n.Path))
				}
			}
		}
		return true
	})
}

// storeUsers counts the handlers, by name, that share a pooled store: the
// metric names each.
type storeUsers struct {
	mu    sync.Mutex
	names map[string]int
	// heads are, by handler name, the first dimensions its rules keep
	// their records under (see keyHeads).
	heads map[string][]string
}

// add counts a handler of the store, whose rules keep their records under
// heads, and returns, by the name of each other cap set on the store, the
// heads the two have in common: their rules count each other's sends.
func (u *storeUsers) add(name string, heads []string) map[string][]string {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.names == nil {
		u.names, u.heads = map[string]int{}, map[string][]string{}
	}
	u.names[name]++
	u.heads[name] = heads
	var shared map[string][]string
	for other, theirs := range u.heads {
		if other == name {
			continue
		}
		for _, h := range heads {
			if slices.Contains(theirs, h) {
				if shared == nil {
					shared = map[string][]string{}
				}
				shared[other] = append(shared[other], h)
			}
		}
	}
	return shared
}

func (u *storeUsers) remove(name string) {
	u.mu.Lock()
	if u.names[name]--; u.names[name] <= 0 {
		delete(u.names, name)
		delete(u.heads, name)
	}
	u.mu.Unlock()
}

func (u *storeUsers) userNames() []string {
	u.mu.Lock()
	defer u.mu.Unlock()
	out := make([]string, 0, len(u.names))
	for n := range u.names {
		out = append(out, n)
	}
	return out
}

// pathLog logs the write paths of one pooled store's nodes after the
// start has logged them (logWritePaths): a change (an upgrade in place, a
// failover to an older build), and the first answer of a node that had
// not answered at start (Redis down then). The store calls notify on its
// own goroutine, so it only logs; logger is asked each time, as a reload
// may have replaced Caddy's.
type pathLog struct {
	mu     sync.Mutex
	last   map[string]redisstore.WritePath // by node: the path last logged
	logger func() *zap.Logger
}

func newPathLog(logger func() *zap.Logger) *pathLog {
	return &pathLog{last: map[string]redisstore.WritePath{}, logger: logger}
}

// notify is the store's OnWritePath. A node's first answer is the
// start's to log, unless the start found it unknown (see unanswered).
func (p *pathLog) notify(n redisstore.NodeWritePath) {
	p.mu.Lock()
	prev, seen := p.last[n.Node]
	p.last[n.Node] = n.Path
	p.mu.Unlock()
	if !seen || prev == n.Path {
		return
	}
	p.logger().Info("frequency cap store write path changed",
		zap.String("node", n.Node), zap.String("from", string(prev)), zap.String("path", string(n.Path)), zap.String("reason", n.Reason))
}

// unanswered notes that the start found node unknown, so that notify logs
// its first answer; when it has answered since, it returns that path for
// the start to log instead.
func (p *pathLog) unanswered(node string) (redisstore.WritePath, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if prev, ok := p.last[node]; ok && prev != redisstore.WriteUnknown {
		return prev, true
	}
	p.last[node] = redisstore.WriteUnknown
	return redisstore.WriteUnknown, false
}

// logWritePaths asks every node of the pooled store which write it takes
// and logs the answers, one line a node, with the cap set's fields.
func logWritePaths(ctx context.Context, logger *zap.Logger, p *pooledStore, cluster bool, fields []zap.Field) {
	s, ok := p.store.(*redisstore.Store)
	if !ok {
		return
	}
	paths, err := s.DetectWritePaths(ctx)
	for _, n := range paths {
		path, reason := n.Path, n.Reason
		if path == redisstore.WriteUnknown && p.paths != nil {
			if answered, ok := p.paths.unanswered(n.Node); ok {
				path, reason = answered, "answered since"
			} else {
				reason += "; logged when it answers"
			}
		}
		more := []zap.Field{zap.String("node", n.Node), zap.String("path", string(path)), zap.String("reason", reason)}
		if cluster {
			more = append(more, zap.String("applies_to", "decisions whose keys share a hash tag; those over several tags are reserved in the script"))
		}
		logger.Info("frequency cap store write path", append(append([]zap.Field{}, fields...), more...)...)
	}
	if err != nil {
		logger.Debug("frequency cap store write path: a node did not answer, asked again at its first write", append(append([]zap.Field{}, fields...), zap.Error(err))...)
	}
}
