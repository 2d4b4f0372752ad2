package caddymodule

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/lease"
	"github.com/freqcap/caddy-freqcap/limiter/memstore"
	"github.com/freqcap/caddy-freqcap/limiter/redisstore"
)

// stores holds the stores (and their Redis clients) of every loaded
// handler. A config reload provisions the new handlers before cleaning up
// the old ones, so a store whose key is unchanged is never closed: its
// counters and connections live on.
var stores = caddy.NewUsagePool()

// pooledStore is a store with the client it runs on.
type pooledStore struct {
	store  limiter.Store
	client redis.UniversalClient
	// storeUsers names the handlers that use it, for the write path metric.
	storeUsers
	// paths logs a Redis store's write paths as they change; nil for the
	// memory store.
	paths *pathLog
	// parkAs is a memory store's key, under which it is parked when its
	// last handler is cleaned up (parking.go); "" for Redis.
	parkAs string
	// rechecking is set while a start check is asked again for the store
	// (recheckWhenAnswered): one for all the cap sets it serves.
	rechecking atomic.Bool
	// parkings counts a memory store's parkings: a watcher (watchParked)
	// watches one parking, and ends when the store is parked again.
	parkings atomic.Int64
}

// Destruct implements caddy.Destructor: it runs when the last handler that
// uses the store is cleaned up. A memory store that holds counts is
// parked, not closed.
func (p *pooledStore) Destruct() error {
	if park(p) {
		return nil
	}
	return p.close()
}

// close closes the store and its client.
func (p *pooledStore) close() error {
	err := p.store.Close()
	if p.client != nil {
		err = errors.Join(err, p.client.Close())
	}
	return err
}

// storeKey identifies a store: handlers with equal keys share one. cfg is
// the resolved Redis config, or nil for the memory store.
func storeKey(cfg *redisstore.Config, prefix string) (string, error) {
	if cfg == nil {
		return "memory|" + prefix, nil
	}
	canon, err := json.Marshal(cfg)
	if err != nil {
		return "", fmt.Errorf("encoding redis config: %w", err)
	}
	return fmt.Sprintf("redis|%s|%s|%s", canon, prefix, cfg.EffectiveTimeout()), nil
}

// newStore builds the store key names; it does not connect.
func newStore(cfg *redisstore.Config, prefix, key string) (*pooledStore, error) {
	if cfg == nil {
		return &pooledStore{store: memstore.New(memstore.Options{}), parkAs: key}, nil
	}
	client, err := cfg.NewClient()
	if err != nil {
		return nil, fmt.Errorf("creating redis client: %w", err)
	}
	// The config knows whether it asked for a cluster; a client behind a
	// wrapper would not show it.
	paths := newPathLog(moduleLogger)
	s := redisstore.New(client, redisstore.Options{Prefix: prefix, Timeout: cfg.EffectiveTimeout(), Cluster: cfg.Cluster, ScriptOnly: cfg.ScriptOnly,
		NoNativeWrite: cfg.NoNativeWrite, OnWritePath: paths.notify})
	return &pooledStore{store: s, client: client, paths: paths}, nil
}

// moduleLogger is Caddy's logger under the module's name, for what a
// pooled store logs: it outlives the handler that made it.
func moduleLogger() *zap.Logger { return caddy.Log().Named("http.handlers.frequency_cap") }

// acquireStore loads or creates the handler's store and remembers its key
// for Cleanup.
func (h *Handler) acquireStore(cfg *redisstore.Config) error {
	key, err := storeKey(cfg, h.KeyPrefix)
	if err != nil {
		return err
	}
	v, _, err := stores.LoadOrNew(key, func() (caddy.Destructor, error) {
		if p := unpark(key); p != nil {
			return p, nil
		}
		return newStore(cfg, h.KeyPrefix, key)
	})
	if err != nil {
		return err
	}
	h.storeKey = key
	h.store = v.(*pooledStore).store
	v.(*pooledStore).add(h.Name, h.keyHeads())
	h.keySpace = key // a memory store is one prefix's
	if cfg != nil {
		// The server and db, whatever the prefix: two prefixes and
		// dimension names may spell one key ("fc" and "s.to", "fcs." and
		// "to"), so the keys' heads are compared whole.
		h.keySpace = cfg.KeySpace("")
	}
	h.warnSharedKeys(keySpaces.add(h.keySpace, h.Name, h.keyHeadsSpelt()))
	if cfg != nil && h.hasLease() {
		if err := h.acquireLeases(key); err != nil {
			return err
		}
	}
	if cfg == nil || h.OnError != OnErrorLocal {
		return nil
	}
	// on_error local: a memory store of this handler's own, so that each
	// gateway (each handler name, in tests several in one process) admits
	// its share; pooled like the others, so it outlives a reload.
	key = "local|" + h.Name + "|" + h.KeyPrefix
	v, _, err = stores.LoadOrNew(key, func() (caddy.Destructor, error) {
		if p := unpark(key); p != nil {
			return p, nil
		}
		return &pooledStore{store: memstore.New(memstore.Options{}), parkAs: key}, nil
	})
	if err != nil {
		return err
	}
	h.localKey = key
	h.store = limiter.NewFallback(h.store, v.(*pooledStore).store, max(1, h.LocalDivisor))
	return nil
}

// keyHeads are the first dimensions the handler's rules keep records
// under (globalDimension for the rules without by), each once; quiet
// rules keep none.
func (h *Handler) keyHeads() []string {
	var heads []string
	for _, cr := range h.rules {
		r := cr.rule
		if r.Quiet != nil || len(r.By) == 0 || slices.Contains(heads, r.By[0]) {
			continue
		}
		heads = append(heads, r.By[0])
	}
	return heads
}

// keyHeadsSpelt are the key heads as the keys begin: the key prefix and
// the first dimension spelt together.
func (h *Handler) keyHeadsSpelt() []string {
	heads := h.keyHeads()
	for i, d := range heads {
		heads[i] = h.KeyPrefix + d
	}
	return heads
}

// keySpaces are the cap sets by the keys they write (a store's server and
// db, or the memory store, and a key prefix): two configs that spell one
// server otherwise (a URL and an address, localhost and 127.0.0.1, other
// timeouts) are pooled apart, yet count in the same keys.
var keySpaces = &keySpaceUsers{m: map[string]*storeUsers{}}

type keySpaceUsers struct {
	mu sync.Mutex
	m  map[string]*storeUsers
}

// add counts a cap set named name in space and returns the other cap sets
// there whose rules start with the same dimensions (see storeUsers.add).
func (ks *keySpaceUsers) add(space, name string, heads []string) map[string][]string {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	u := ks.m[space]
	if u == nil {
		u = &storeUsers{}
		ks.m[space] = u
	}
	return u.add(name, heads)
}

// remove uncounts one cap set named name in space; harmless for none.
func (ks *keySpaceUsers) remove(space, name string) {
	ks.mu.Lock()
	defer ks.mu.Unlock()
	if u := ks.m[space]; u != nil {
		u.remove(name)
		if len(u.userNames()) == 0 {
			delete(ks.m, space)
		}
	}
}

// warnSharedKeys warns that other cap sets on the same store and key
// prefix have rules that start with the same dimensions as this one's:
// their records share keys, so each counts the other's sends. That may
// be meant (a daily cap across channels), but two cap sets copied from
// the examples into one config would not mean it.
//
// heads are the shared keys' heads, the key prefix and first dimension
// spelt together (the other cap set's may spell them otherwise).
func (h *Handler) warnSharedKeys(shared map[string][]string) {
	for other, heads := range shared {
		dims, keys := make([]string, len(heads)), make([]string, len(heads))
		for i, head := range heads {
			keys[i] = head + "{…}"
			dims[i] = strings.TrimPrefix(head, h.KeyPrefix)
			if dims[i] == globalDimension {
				dims[i] = "the rules without by"
			}
		}
		h.logger.Warn("cap sets share keys: the rules of each that keep records under the same keys count the other's sends; give each cap set a key_prefix of its own unless that is meant",
			zap.String("handler", h.Name), zap.String("other", other), zap.String("key_prefix", h.KeyPrefix), zap.Strings("dimensions", dims), zap.Strings("keys", keys))
	}
}

// acquireLeases puts the lease store of the Redis store under key in
// front of it; the local store of on_error local goes in front of both,
// so blocks in hand keep admitting while Redis fails and a block that
// cannot be taken is decided locally. The lease store is pooled beside
// the Redis store (which it leaves open on Close: that has its own
// entry), for every handler of that store with a leased rule: a reload
// keeps the blocks in hand, and a rule changed by it takes blocks of its
// own (the lease state is per rule), the old ones given back at their
// term's end.
func (h *Handler) acquireLeases(key string) error {
	inner := h.store
	v, _, err := stores.LoadOrNew(leasesKey(key), func() (caddy.Destructor, error) {
		return &pooledStore{store: lease.New(inner, lease.Options{KeepInnerOpen: true, OnGiveBack: logGiveBack})}, nil
	})
	if err != nil {
		return err
	}
	h.store = v.(*pooledStore).store
	return nil
}

// logGiveBack logs a leased block's give-back that the store failed, and
// the retry that made it: between the two, the units count as used.
func logGiveBack(units int64, again bool, err error) {
	if again {
		moduleLogger().Info("frequency cap lease: units given back after the store failed to take them", zap.Int64("units", units))
		return
	}
	moduleLogger().Warn("frequency cap lease: the store failed to take back a block's unspent units: they count as used until it does (sent again every second while the config runs; at an unload or shutdown, not again)",
		zap.Int64("units", units), zap.Error(err))
}

// leasesKey names the lease store of the store under key.
func leasesKey(key string) string { return "lease|" + key }

// releaseStore gives the store back, once; harmless when none was taken.
// h.store stays set: on a reload Caddy cleans the old config up while its
// requests may still be deciding (it does not wait for them), and one
// that found no store panicked. The new config holds the same pooled store
// by then; at an unload, a closed store answers its own error, which
// on_error decides.
func (h *Handler) releaseStore() error {
	if h.storeKey == "" {
		return nil
	}
	key, local := h.storeKey, h.localKey
	h.storeKey, h.localKey = "", ""
	if p := pooled(key); p != nil {
		p.remove(h.Name)
	}
	keySpaces.remove(h.keySpace, h.Name)
	var err error
	if strings.HasPrefix(key, "redis|") && h.hasLease() {
		// Before the Redis store: its Close gives the blocks back there.
		_, err = stores.Delete(leasesKey(key))
	}
	_, serr := stores.Delete(key)
	err = errors.Join(err, serr)
	if local != "" {
		_, lerr := stores.Delete(local)
		err = errors.Join(err, lerr)
	}
	return err
}

// pooled returns the pooled store of key without taking a reference, or
// nil.
func pooled(key string) *pooledStore {
	var p *pooledStore
	stores.Range(func(k, v any) bool {
		if k == key {
			p = v.(*pooledStore)
			return false
		}
		return true
	})
	return p
}
