package caddymodule

import (
	"context"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// This file shows the operator which write each Redis node takes for the
// decisions made in Go (limiter.WritePath): native, SET … IFEQ where the
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
	stores.Range(func(_, value any) bool {
		p := value.(*pooledStore)
		s, ok := p.store.(*limiter.Redis)
		if !ok {
			return true
		}
		paths := s.WritePaths()
		for _, handler := range p.userNames() {
			for _, n := range paths {
				ch <- prometheus.MustNewConstMetric(writePathDesc, prometheus.GaugeValue, 1, handler, n.Node, string(n.Path))
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
}

func (u *storeUsers) add(name string) {
	u.mu.Lock()
	if u.names == nil {
		u.names = map[string]int{}
	}
	u.names[name]++
	u.mu.Unlock()
}

func (u *storeUsers) remove(name string) {
	u.mu.Lock()
	if u.names[name]--; u.names[name] <= 0 {
		delete(u.names, name)
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

// writePathChanges returns the store's OnWritePath: it logs a node whose
// path changed after it was first known. The first answer of each node is
// logged by logWritePaths, with the handler that asked. It runs on the
// store's goroutine, so it only logs; logger is asked at each change, as
// a reload may have replaced Caddy's.
func writePathChanges(logger func() *zap.Logger) func(limiter.NodeWritePath) {
	var mu sync.Mutex
	known := map[string]limiter.WritePath{}
	return func(n limiter.NodeWritePath) {
		mu.Lock()
		was, seen := known[n.Node]
		known[n.Node] = n.Path
		mu.Unlock()
		if !seen || was == limiter.WriteUnknown || was == n.Path {
			return
		}
		logger().Info("frequency cap store write path changed",
			zap.String("node", n.Node), zap.String("from", string(was)), zap.String("path", string(n.Path)), zap.String("reason", n.Reason))
	}
}

// logWritePaths asks every node of the store which write it takes and
// logs the answers, one line a node. On a cluster single sends are always
// one script run; the path is that of batch sends under batch drop.
func logWritePaths(ctx context.Context, logger *zap.Logger, s *limiter.Redis, cluster bool, fields []zap.Field) {
	paths, err := s.DetectWritePaths(ctx)
	for _, n := range paths {
		more := []zap.Field{zap.String("node", n.Node), zap.String("path", string(n.Path)), zap.String("reason", n.Reason)}
		if cluster {
			more = append(more, zap.String("applies_to", "batch sends under batch drop; single sends on a cluster are one script run"))
		}
		logger.Info("frequency cap store write path", append(append([]zap.Field{}, fields...), more...)...)
	}
	if err != nil {
		logger.Debug("frequency cap store write path: a node did not answer, asked again at its first write", append(append([]zap.Field{}, fields...), zap.Error(err))...)
	}
}
