package caddymodule

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/freqcap/caddy-freqcap/limiter/redisstore"
)

// This file makes a misconfigured store loud at start. Provision logs
// which store each cap set uses and where; for Redis it then checks the
// store (redisstore.Store.CheckStart, a few commands per node, and under
// Sentinel Config.CheckSentinels; bounded by startCheckTimeout). A server
// that answered and refused the login or a command the store needs fails
// the load: under on_error allow it would otherwise have turned every cap
// off. The rest is logged for the operator to act on: a store that cannot
// be reached (every decision goes to on_error until it answers), an
// eviction policy that may delete counts, or that the policy could not be
// read. Last it logs, in the background, which write each node takes
// (write_paths.go).

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
		if opt, err := cfg.URLOptions(); err == nil {
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

// checkStoreAtStart logs the cap set's store at info and, for Redis, runs
// the start check before Provision returns, bounded by
// startCheckTimeout: a server that answered but refused the login or a
// command the store needs fails the load (refusalError); anything else
// it found is logged, and the write paths are then looked up in the
// background, as is, once it answers, a node that did not
// (recheckWhenAnswered). ctx ends the background work when the config is
// unloaded.
func (h *Handler) checkStoreAtStart(ctx caddy.Context, cfg *redisstore.Config) error {
	fields := h.storeFields(cfg)
	h.logger.Info("frequency cap store", fields...)
	p := pooled(h.storeKey)
	if p == nil {
		return nil
	}
	s, ok := p.store.(*redisstore.Store)
	if !ok {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, startCheckTimeout)
	check := startCheck(cctx, s, cfg)
	cancel()
	if err := refusalError(check, cfg); err != nil {
		return err
	}
	if ctx.Err() != nil {
		return nil // unloaded meanwhile: what was cut short is no news
	}
	startFields := fields // without the hint, which is about the start
	if check.Err != nil && (cfg.TLS || strings.HasPrefix(cfg.URL, "rediss://")) {
		// A server without TLS reads the client's hello as a command and
		// waits for the rest: the handshake never ends, which looks like
		// an outage.
		fields = append(fields, zap.String("hint", "tls is on: a server that does not speak TLS never completes the handshake and looks unreachable; check that the server has TLS on"))
	}
	logStartCheck(h.logger, check, fields)
	logger := h.logger
	if unanswered(check) && p.rechecking.CompareAndSwap(false, true) {
		go func() {
			defer p.rechecking.Store(false)
			recheckWhenAnswered(ctx, logger, s, cfg, startFields, recheckFirst)
		}()
	}
	go func() {
		wctx, cancel := context.WithTimeout(ctx, startCheckTimeout)
		defer cancel()
		logWritePaths(wctx, logger, p, cfg.Cluster, fields)
	}()
	return nil
}

// startCheck runs the store's start check and, under Sentinel, asks the
// sentinels too, at once; the sentinels come first in Nodes. A node it
// could not ask is then tried with a TLS handshake when the config has
// no TLS: a server that speaks only TLS would look down forever.
func startCheck(ctx context.Context, s *redisstore.Store, cfg *redisstore.Config) redisstore.StartCheck {
	sentinels := make(chan []redisstore.NodeCheck, 1)
	go func() { sentinels <- cfg.CheckSentinels(ctx) }()
	check := s.CheckStart(ctx)
	check.Nodes = append(<-sentinels, check.Nodes...)
	cfg.MarkTLSServers(ctx, &check)
	return check
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

// logStartCheck logs what a start check without refusals (refusalError)
// found that needs the operator, or one line saying that the store is
// ready.
func logStartCheck(logger *zap.Logger, check redisstore.StartCheck, fields []zap.Field) {
	with := func(more ...zap.Field) []zap.Field { return append(append([]zap.Field{}, fields...), more...) }
	if check.Err != nil && len(check.Nodes) == 0 {
		logger.Warn("frequency cap store unreachable at start: decisions go to on_error until it answers", with(zap.Error(check.Err))...)
		return
	}
	ready, unreachable, sentinels := 0, 0, 0
	var servers, policies []string
	for _, n := range check.Nodes {
		node := zap.String("node", n.Node)
		if n.Err != nil {
			unreachable++
			if n.Sentinel {
				node = zap.String("sentinel", n.Node)
			}
			logger.Warn("frequency cap store unreachable at start: decisions go to on_error until it answers", with(node, zap.Error(n.Err))...)
			continue
		}
		if n.Sentinel {
			sentinels++
			continue
		}
		if n.WritesRefused != nil {
			// It answered, so it is no outage, but every decision's
			// write fails until its operator acts.
			unreachable++
			logger.Warn("frequency cap store refuses writes at start (out of memory, a failing snapshot, or fewer replicas than min-replicas-to-write): decisions go to on_error until it takes them",
				with(node, zap.NamedError("reason", n.WritesRefused))...)
			continue
		}
		switch {
		case redisstore.EvictsCounts(n.EvictionPolicy) && n.MaxMemory != 0:
			// With no maxmemory (0) a 64-bit server never evicts.
			logger.Warn("frequency cap store: redis may evict counts at maxmemory (every key has a TTL, so volatile-* evicts them too): set maxmemory-policy noeviction",
				with(node, zap.String("maxmemory_policy", n.EvictionPolicy), zap.Int64("maxmemory", n.MaxMemory))...)
		case n.EvictionPolicy == "":
			logger.Info("frequency cap store: could not read the eviction policy (grant +info, or give the server INFO under its own name, to let the gateway check): make sure maxmemory-policy is noeviction",
				with(node, zap.NamedError("reason", n.PolicyErr))...)
		}
		if n.NoAppendOnly {
			// Replicas do not make up for it: they keep the counts
			// through a failover, but a master that restarts empty
			// before one empties them too, as they sync from it.
			logger.Warn("frequency cap store: redis keeps no append-only file, so a restart loses the counts written since its last snapshot (all of them without snapshots) and every recipient starts a new quota; replicas keep them only through a failover: set appendonly yes",
				with(node, zap.Int("replicas", n.Replicas))...)
		}
		ready++
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
	if check.Err == nil && ready+sentinels == len(check.Nodes) {
		logger.Info("frequency cap store ready", with(zap.Int("nodes", ready), zap.Strings("servers", servers), zap.String("maxmemory_policy", strings.Join(dedupe(policies), ",")))...)
	}
}

// refusalError is the error that stops a config from loading when the
// check found a server that answered and refused the login (WRONGPASS,
// NOAUTH) or a command the store needs (NOPERM): not an outage that
// on_error may cover, since it lasts until someone changes the config or
// the server's users, and under on_error allow it would leave every
// recipient, or on a cluster every recipient of that node, uncapped. It
// names each server, the user and what the server said.
func refusalError(check redisstore.StartCheck, cfg *redisstore.Config) error {
	rs := check.Refusals()
	if len(rs) == 0 {
		return nil
	}
	user := cfg.Username
	if cfg.URL != "" {
		if opt, err := cfg.URLOptions(); err == nil {
			user = opt.Username
		}
	}
	errs := make(refusals, len(rs))
	for i, r := range rs {
		r.User = user
		if r.Sentinel {
			r.User = cfg.SentinelUsername
		}
		if r.Node == "cluster" {
			r.Node = "the cluster seeds " + strings.Join(cfg.Addresses, ", ")
		}
		errs[i] = r
	}
	return errs
}

// refusals are the servers' refusals found at start, as one error.
type refusals []error

func (rs refusals) Error() string {
	msgs := make([]string, len(rs))
	for i, r := range rs {
		msgs[i] = r.Error()
	}
	var fixes []string
	for _, r := range rs {
		var re *redisstore.RefusedError
		if errors.As(r, &re) && !slices.Contains(fixes, re.Fix()) {
			fixes = append(fixes, re.Fix())
		}
	}
	return strings.Join(msgs, "; ") + " (a configuration error, not an outage: " + strings.Join(fixes, "; ") + ")"
}

func (rs refusals) Unwrap() []error { return rs }

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
