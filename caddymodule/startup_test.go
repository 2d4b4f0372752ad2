package caddymodule

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter/redisstore"
)

// startCheckLogs provisions a handler from JSON whose caps use the Redis
// that redis (a JSON object) configures, runs its start check as
// Provision does, and returns what it logged.
func startCheckLogs(t *testing.T, redisJSON, onError string) []observer.LoggedEntry {
	t.Helper()
	h, err := load(t, fmt.Sprintf(`{"name": "push", "redis": %s, "on_error": %q, "key_prefix": "sc:",
		"dimensions": {"r": "{json.to}"}, "rules": [{"name": "r", "by": ["r"], "limit": 5, "window": 60000000000}]}`, redisJSON, onError))
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.DebugLevel)
	s := h.redisStore()
	if s == nil {
		t.Fatal("no redis store")
	}
	c, _ := h.Redis.resolve(caddy.NewReplacer())
	ctx, cancel := context.WithTimeout(context.Background(), startCheckTimeout)
	defer cancel()
	logStartCheck(zap.New(core), s.CheckStart(ctx), h.storeFields(&c))
	return logs.All()
}

// only returns the entries at level whose message contains msg.
func only(entries []observer.LoggedEntry, level zapcore.Level, msg string) []observer.LoggedEntry {
	var out []observer.LoggedEntry
	for _, e := range entries {
		if e.Level == level && strings.Contains(e.Message, msg) {
			out = append(out, e)
		}
	}
	return out
}

// A cap set's store is described at start by where it is (never with a
// password), and the start check says, each in its own line, what an
// operator must act on: a store that cannot be reached, an eviction
// policy that may evict counts, or that the policy could not be read; a
// store with none of these is logged ready. A command the user may not
// run (which, on which keys) fails the load.
func TestStartCheckLogs(t *testing.T) {
	ctx := context.Background()
	t.Run("fields", func(t *testing.T) {
		h := &Handler{Name: "push", KeyPrefix: "fc:", OnError: OnErrorLocal, LocalDivisor: 3}
		for _, c := range []struct {
			cfg  *redisstore.Config
			want map[string]any
		}{
			{nil, map[string]any{"store": "memory"}},
			{&redisstore.Config{URL: "redis://gw:hunter2@10.0.0.5:6380/2"}, map[string]any{"store": "redis", "db": int64(2), "user": "gw", "local_divisor": int64(3)}},
			{&redisstore.Config{}, map[string]any{"store": "redis", "key_prefix": "fc:", "on_error": "local"}},
			{&redisstore.Config{Addresses: []string{"n1:7000", "n2:7000"}, Cluster: true}, map[string]any{"store": "redis cluster"}},
			{&redisstore.Config{Addresses: []string{"s1:26379"}, SentinelMaster: "mymaster"}, map[string]any{"store": "redis sentinel", "sentinel_master": "mymaster"}},
		} {
			core, logs := observer.New(zapcore.InfoLevel)
			zap.New(core).Info("x", h.storeFields(c.cfg)...)
			got := logs.All()[0].ContextMap()
			for k, v := range c.want {
				if got[k] != v {
					t.Errorf("%+v: %s = %v, want %v (all: %v)", c.cfg, k, got[k], v, got)
				}
			}
			if c.cfg != nil && got["addresses"] == nil {
				t.Errorf("%+v: no addresses: %v", c.cfg, got)
			}
			if strings.Contains(fmt.Sprint(got), "hunter2") {
				t.Errorf("the password is logged: %v", got)
			}
		}
	})

	t.Run("unreachable", func(t *testing.T) {
		down := redistest.Start(t)
		down.Stop()
		logs := startCheckLogs(t, fmt.Sprintf(`{"addresses": [%q]}`, down.Addr), "local")
		w := only(logs, zapcore.WarnLevel, "unreachable at start")
		if len(w) != 1 || w[0].ContextMap()["on_error"] != "local" {
			t.Fatalf("want one warning naming on_error local; got %v", logs)
		}
	})

	t.Run("a permission missing", func(t *testing.T) {
		srv := redistest.Start(t)
		admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
		defer admin.Close()
		if err := admin.Do(ctx, "ACL", "SETUSER", "gw", "on", ">secret", "~sc:*", "-@all", "+evalsha", "+eval", "+get", "+del", "+time", "+mget").Err(); err != nil {
			t.Fatal(err)
		}
		_, err := load(t, fmt.Sprintf(`{"name": "push", "redis": {"addresses": [%q], "username": "gw", "password": "secret"}, "on_error": "deny", "key_prefix": "sc:",
			"dimensions": {"r": "{json.to}"}, "rules": [{"name": "r", "by": ["r"], "limit": 5, "window": 60000000000}]}`, srv.Addr))
		if err == nil || !strings.Contains(err.Error(), `set on keys sc:* (inside the store's scripts)`) {
			t.Fatalf("loading with a user without SET: %v; want an error naming set on sc:* inside the scripts", err)
		}

		// INFO and CONFIG GET are not needed: the policy is reported unread.
		if err := admin.Do(ctx, "ACL", "SETUSER", "gw", "+set").Err(); err != nil {
			t.Fatal(err)
		}
		logs := startCheckLogs(t, fmt.Sprintf(`{"addresses": [%q], "username": "gw", "password": "secret"}`, srv.Addr), "deny")
		if len(only(logs, zapcore.InfoLevel, "could not read the eviction policy")) != 1 {
			t.Errorf("a user without INFO: want the policy reported unread; got %v", logs)
		}
	})

	t.Run("evicting policy", func(t *testing.T) {
		srv := redistest.Start(t, "--maxmemory", "100mb", "--maxmemory-policy", "volatile-lru")
		logs := startCheckLogs(t, fmt.Sprintf(`{"addresses": [%q]}`, srv.Addr), "allow")
		w := only(logs, zapcore.WarnLevel, "may evict counts")
		if len(w) != 1 || w[0].ContextMap()["maxmemory_policy"] != "volatile-lru" {
			t.Fatalf("want one warning naming volatile-lru; got %v", logs)
		}
		// Without a maxmemory a 64-bit server never evicts: nothing
		// to warn of.
		srv = redistest.Start(t, "--maxmemory-policy", "allkeys-lru", "--appendonly", "yes")
		logs = startCheckLogs(t, fmt.Sprintf(`{"addresses": [%q]}`, srv.Addr), "allow")
		if w := only(logs, zapcore.WarnLevel, "may evict counts"); len(w) != 0 {
			t.Errorf("allkeys-lru without maxmemory: %v", w)
		}
	})

	t.Run("ready", func(t *testing.T) {
		srv := redistest.Start(t, "--appendonly", "yes")
		logs := startCheckLogs(t, fmt.Sprintf(`{"addresses": [%q]}`, srv.Addr), "allow")
		r := only(logs, zapcore.InfoLevel, "store ready")
		if len(r) != 1 || len(logs) != 1 || r[0].ContextMap()["maxmemory_policy"] != "noeviction" {
			t.Fatalf("want one line saying ready with noeviction; got %v", logs)
		}
	})

	// A Redis without an append-only file loses its counts when it
	// restarts (a probe restarted one empty: every recipient got a new
	// quota, and nothing said so): the start says it, naming the node.
	t.Run("no append-only file", func(t *testing.T) {
		srv := redistest.Start(t)
		logs := startCheckLogs(t, fmt.Sprintf(`{"addresses": [%q]}`, srv.Addr), "allow")
		w := only(logs, zapcore.WarnLevel, "keeps no append-only file")
		if len(w) != 1 || w[0].ContextMap()["node"] != srv.Addr || len(only(logs, zapcore.InfoLevel, "store ready")) != 1 {
			t.Fatalf("want one warning naming the node, and the store ready; got %v", logs)
		}

		// With a replica too: it keeps the counts through a failover,
		// but a master restarted empty before one empties it as well.
		// The warning names the replicas.
		host, port, _ := net.SplitHostPort(srv.Addr)
		redistest.Start(t, "--replicaof", host, port)
		admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
		defer admin.Close()
		for i := 0; i < 100 && !strings.Contains(admin.Info(ctx, "replication").Val(), "connected_slaves:1"); i++ {
			time.Sleep(20 * time.Millisecond)
		}
		logs = startCheckLogs(t, fmt.Sprintf(`{"addresses": [%q]}`, srv.Addr), "allow")
		w = only(logs, zapcore.WarnLevel, "keeps no append-only file")
		if len(w) != 1 || w[0].ContextMap()["replicas"] != int64(1) {
			t.Fatalf("with a replica: want one warning naming 1 replica; got %v", logs)
		}
	})

	t.Run("cluster", func(t *testing.T) {
		c := redistest.StartCluster(t, 3, 0)
		addrs := `"` + strings.Join(c.Addrs(), `", "`) + `"`
		logs := startCheckLogs(t, fmt.Sprintf(`{"addresses": [%s], "cluster": true}`, addrs), "deny")
		r := only(logs, zapcore.InfoLevel, "store ready")
		if len(r) != 1 || r[0].ContextMap()["nodes"] != int64(3) {
			t.Fatalf("want one line saying 3 nodes ready; got %v", logs)
		}
	})
}

// A Redis at maxmemory under noeviction refuses the decision's write:
// under on_error deny the request gets 503 at once, the failure is logged
// with reason out_of_memory and counted in store_error_reasons_total, and
// nothing waits.
func TestOutOfMemoryLoggedAndCounted(t *testing.T) {
	srv := redistest.Start(t, "--maxmemory-policy", "noeviction")
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	h, logs := observed(t, fmt.Sprintf(`{"name": "oomtest", "redis": {"addresses": [%q]}, "on_error": "deny", "key_prefix": "oom:",
		"dimensions": {"r": "{json.to}"}, "rules": [{"name": "r", "by": ["r"], "limit": 5, "window": 60000000000}]}`, srv.Addr), time.Hour)
	counter := storeReasonsVec().WithLabelValues("oomtest", redisstore.ReasonOutOfMemory)
	before := counted(t, counter)
	if w := serve(t, h, `{"to": "alice"}`); w.Code != http.StatusOK {
		t.Fatalf("before maxmemory: %d", w.Code)
	}
	if err := admin.ConfigSet(context.Background(), "maxmemory", "1").Err(); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	w := serve(t, h, `{"to": "alice"}`)
	if took := time.Since(start); w.Code != http.StatusServiceUnavailable || took > 50*time.Millisecond {
		t.Fatalf("at maxmemory: %d after %s; want 503 at once", w.Code, took)
	}
	if got := counted(t, counter) - before; got != 1 {
		t.Errorf("store_error_reasons_total{reason=out_of_memory} rose by %v, want 1", got)
	}
	warned := only(logs.All(), zapcore.WarnLevel, "store failing")
	if len(warned) != 1 || warned[0].ContextMap()["reason"] != redisstore.ReasonOutOfMemory {
		t.Fatalf("want one warning with reason out_of_memory; got %v", logs.All())
	}
}

// counted is a counter's value.
func counted(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}
