package caddymodule

import (
	"context"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/freqcap/caddy-freqcap/limiter/redisstore"
)

// This file makes a misconfigured store loud at start. Provision logs
// which store each cap set uses and where; for Redis it then checks the
// store in the background (redisstore.Store.CheckStart, a few commands per
// node, bounded by startCheckTimeout) and logs what the operator must act
// on: a store that cannot be reached (every decision would go to
// on_error), a command or key the Redis user may not use, an eviction
// policy that may delete counts, or that the policy could not be read.
// Without it the first sign of a wrong address was a warning at the first
// request, and with on_error local a gateway quietly ran on a share of
// every limit. Last it logs which write each node takes (write_paths.go).

// startCheckTimeout bounds the start check: enough to dial every node of
// a cluster once with the default timeouts, short enough that a reload
// does not leave checks running.
const startCheckTimeout = 3 * time.Second

// storeFields describe where a cap set keeps its counts, for the start
// log: never a password.
func (h *Handler) storeFields(cfg *redisstore.Config) []zap.Field {
	fields := []zap.Field{zap.String("handler", h.Name)}
	if cfg == nil {
		return append(fields, zap.String("store", storeMemory))
	}
	kind, addrs, db, tls, user := "redis", cfg.Addresses, cfg.DB, cfg.TLS, cfg.Username
	if cfg.URL != "" {
		if opt, err := redis.ParseURL(cfg.URL); err == nil {
			addrs, db, tls, user = []string{opt.Addr}, opt.DB, opt.TLSConfig != nil, opt.Username
		}
	}
	if len(addrs) == 0 {
		addrs = []string{"127.0.0.1:6379"}
	}
	switch {
	case cfg.Cluster:
		kind = "redis cluster"
	case cfg.SentinelMaster != "":
		kind = "redis sentinel"
		fields = append(fields, zap.String("sentinel_master", cfg.SentinelMaster))
	default:
		fields = append(fields, zap.Int("db", db))
	}
	fields = append(fields,
		zap.String("store", kind),
		zap.Strings("addresses", addrs),
		zap.Bool("tls", tls),
		zap.String("key_prefix", h.KeyPrefix),
		zap.Duration("timeout", cfg.EffectiveTimeout()),
		zap.String("on_error", h.OnError))
	if user != "" {
		fields = append(fields, zap.String("user", user))
	}
	if h.OnError == OnErrorLocal {
		fields = append(fields, zap.Int64("local_divisor", max(1, h.LocalDivisor)))
	}
	return fields
}

// logStoreAtStart logs the cap set's store at info and, for Redis, starts
// the start check; ctx ends the check early when the config is unloaded.
func (h *Handler) logStoreAtStart(ctx caddy.Context, cfg *redisstore.Config) {
	fields := h.storeFields(cfg)
	h.logger.Info("frequency cap store", fields...)
	p := pooled(h.storeKey)
	if p == nil {
		return
	}
	s, ok := p.store.(*redisstore.Store)
	if !ok {
		return
	}
	logger := h.logger
	go func() {
		cctx, cancel := context.WithTimeout(ctx, startCheckTimeout)
		check := s.CheckStart(cctx)
		cancel()
		if ctx.Err() != nil {
			return // unloaded meanwhile: what was cut short is no news
		}
		logStartCheck(logger, check, fields)
		// Its own time: a check that waited on a down node used its own.
		wctx, cancel := context.WithTimeout(ctx, startCheckTimeout)
		defer cancel()
		logWritePaths(wctx, logger, p, cfg.Cluster, fields)
	}()
}

// redisStore is the handler's Redis store, or nil for the memory store.
func (h *Handler) redisStore() *redisstore.Store {
	p := pooled(h.storeKey)
	if p == nil {
		return nil
	}
	s, _ := p.store.(*redisstore.Store)
	return s
}

// logStartCheck logs what a start check found that needs the operator, or
// one line saying that the store is ready.
func logStartCheck(logger *zap.Logger, check redisstore.StartCheck, fields []zap.Field) {
	with := func(more ...zap.Field) []zap.Field { return append(append([]zap.Field{}, fields...), more...) }
	if check.Err != nil && len(check.Nodes) == 0 {
		logger.Warn("frequency cap store unreachable at start: decisions go to on_error until it answers", with(zap.Error(check.Err))...)
		return
	}
	ready, unreachable := 0, 0
	var servers, policies []string
	for _, n := range check.Nodes {
		node := zap.String("node", n.Node)
		if n.Err != nil {
			unreachable++
			logger.Warn("frequency cap store unreachable at start: decisions go to on_error until it answers", with(node, zap.Error(n.Err))...)
			continue
		}
		for _, r := range n.Refused {
			logger.Warn("frequency cap store: the redis user may not run a command the store needs: decisions fail until it may",
				with(node, zap.String("command", r.Command), zap.String("keys", r.Keys), zap.Bool("in_script", r.InScript), zap.String("reason", r.Reason))...)
		}
		switch {
		case redisstore.EvictsCounts(n.EvictionPolicy):
			logger.Warn("frequency cap store: redis may evict counts at maxmemory (every key has a TTL, so volatile-* evicts them too): set maxmemory-policy noeviction",
				with(node, zap.String("maxmemory_policy", n.EvictionPolicy), zap.Int64("maxmemory", n.MaxMemory))...)
		case n.EvictionPolicy == "":
			logger.Info("frequency cap store: could not read the eviction policy (grant +info to let the gateway check): make sure maxmemory-policy is noeviction",
				with(node, zap.NamedError("reason", n.PolicyErr))...)
		}
		if len(n.Refused) == 0 {
			ready++
		}
		if n.Server != "" {
			servers = append(servers, n.Node+" "+n.Server)
		}
		if n.EvictionPolicy != "" {
			policies = append(policies, n.EvictionPolicy)
		}
	}
	if check.Err != nil && unreachable == 0 {
		logger.Warn("frequency cap store unreachable at start: decisions go to on_error until it answers", with(zap.Error(check.Err))...)
		return
	}
	if check.Err == nil && ready == len(check.Nodes) {
		logger.Info("frequency cap store ready", with(zap.Int("nodes", ready), zap.Strings("servers", servers), zap.String("maxmemory_policy", strings.Join(dedupe(policies), ",")))...)
	}
}

// dedupe returns ss without repeats, in order.
func dedupe(ss []string) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range ss {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
