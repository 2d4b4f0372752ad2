package caddymodule

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter/redisstore"
)

// serverWritePath is the write a node of srv should take, from the
// server itself (does SET … IFEQ run?), held to FREQCAP_EXPECT_WRITE_PATH
// when CI sets it for the build under test.
func serverWritePath(t *testing.T, addr string) redisstore.WritePath {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr})
	defer c.Close()
	want := redisstore.WriteScript
	if redistest.HasSetIFEQ(t, c, "wp:probe") {
		want = redisstore.WriteNative
	}
	if env := os.Getenv("FREQCAP_EXPECT_WRITE_PATH"); env != "" && env != string(want) {
		t.Fatalf("FREQCAP_EXPECT_WRITE_PATH=%s, but the server at %s takes %s writes", env, addr, want)
	}
	return want
}

// writePathSeries gathers caddy_frequency_cap_store_write_path and returns
// its series as handler|node|path.
func writePathSeries(t *testing.T) map[string]bool {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(writePaths)
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]bool{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if m.GetGauge().GetValue() != 1 {
				t.Errorf("%v = %v, want 1", l, m.GetGauge().GetValue())
			}
			out[l["handler"]+"|"+l["node"]+"|"+l["path"]] = true
		}
	}
	return out
}

// An operator sees which write each Redis node takes for the decisions
// made in Go: the start logs a line a node with its path and why, and
// caddy_frequency_cap_store_write_path has one series a node and handler,
// with the path the server really supports (native on Valkey 8.1, the
// script on Redis 7.0 and 8.0 and Valkey 8.0); with script_only or
// native_write off, the script, saying why. A handler unloaded takes its series with it.
func TestWritePathLoggedAndExported(t *testing.T) {
	srv := redistest.Start(t)
	want := serverWritePath(t, srv.Addr)
	for _, c := range []struct {
		name, redis string
		path        redisstore.WritePath
	}{
		{"wp_default", fmt.Sprintf(`{"addresses": [%q]}`, srv.Addr), want},
		{"wp_script_only", fmt.Sprintf(`{"addresses": [%q], "script_only": true}`, srv.Addr), redisstore.WriteScript},
		{"wp_native_off", fmt.Sprintf(`{"addresses": [%q], "no_native_write": true}`, srv.Addr), redisstore.WriteScript},
	} {
		t.Run(c.name, func(t *testing.T) {
			h, err := load(t, fmt.Sprintf(`{"name": %q, "redis": %s, "key_prefix": "wp:",
				"dimensions": {"r": "{json.to}"}, "rules": [{"name": "r", "by": ["r"], "limit": 5, "window": 60000000000}]}`, c.name, c.redis))
			if err != nil {
				t.Fatal(err)
			}
			core, logs := observer.New(zapcore.DebugLevel)
			cfg, _ := h.Redis.resolve(caddy.NewReplacer())
			logWritePaths(context.Background(), zap.New(core), pooled(h.storeKey), false, h.storeFields(&cfg))
			lines := only(logs.All(), zapcore.InfoLevel, "frequency cap store write path")
			if len(lines) != 1 {
				t.Fatalf("want one line for the one node; got %v", logs.All())
			}
			f := lines[0].ContextMap()
			if f["node"] != srv.Addr || f["path"] != string(c.path) || f["handler"] != c.name || f["reason"] == "" {
				t.Errorf("the line says %v; want node %s, path %s, handler %s and a reason", f, srv.Addr, c.path, c.name)
			}
			series := writePathSeries(t)
			if key := c.name + "|" + srv.Addr + "|" + string(c.path); !series[key] {
				t.Errorf("no series %s in %v", key, series)
			}
			if err := h.Cleanup(); err != nil {
				t.Fatal(err)
			}
			for key := range writePathSeries(t) {
				if key[:len(c.name)+1] == c.name+"|" {
					t.Errorf("after cleanup the series %s remains", key)
				}
			}
		})
	}
}

// A node whose path changes once known (an upgrade in place, a failover
// to an older build) is logged with where it came from; its first answer
// is not (the start logs it, with the handler), nor an answer that
// changes nothing. A node the start found unknown (Redis down) has its
// first answer logged, and one that answered between the start's question
// and its log line is logged by the start with that answer.
func TestWritePathChangesLogged(t *testing.T) {
	core, logs := observer.New(zapcore.InfoLevel)
	p := newPathLog(func() *zap.Logger { return zap.New(core) })
	for _, path := range []redisstore.WritePath{redisstore.WriteNative, redisstore.WriteNative, redisstore.WriteScript} {
		p.notify(redisstore.NodeWritePath{Node: "10.0.0.1:6379", Path: path, Reason: "r"})
	}
	p.notify(redisstore.NodeWritePath{Node: "10.0.0.2:6379", Path: redisstore.WriteScript})
	got := logs.All()
	if len(got) != 1 {
		t.Fatalf("want one line, for native to script; got %v", got)
	}
	if f := got[0].ContextMap(); f["node"] != "10.0.0.1:6379" || f["from"] != "native" || f["path"] != "script" {
		t.Errorf("the line says %v", f)
	}

	// Down at start: unknown, then its first answer is news.
	if _, ok := p.unanswered("10.0.0.3:6379"); ok {
		t.Fatal("a node never heard from has answered")
	}
	p.notify(redisstore.NodeWritePath{Node: "10.0.0.3:6379", Path: redisstore.WriteNative})
	if got := logs.All(); len(got) != 2 || got[1].ContextMap()["from"] != "unknown" || got[1].ContextMap()["path"] != "native" {
		t.Errorf("the first answer of a node unknown at start: %v", got)
	}
	// Answered before the start's line: the start logs the answer.
	p.notify(redisstore.NodeWritePath{Node: "10.0.0.4:6379", Path: redisstore.WriteScript})
	if path, ok := p.unanswered("10.0.0.4:6379"); !ok || path != redisstore.WriteScript {
		t.Errorf("a node that answered meanwhile: %s, %v", path, ok)
	}
}
