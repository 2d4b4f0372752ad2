package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter/redisstore"
)

// What a server answers at start for its own state is told apart from a
// refused user, and each load error says what mends it:
//   - a Redis at maxmemory (noeviction) refuses writes for now: the config
//     loads with a warning, its decisions go to on_error, and it serves
//     again once memory is freed (it failed every start and reload,
//     advising to fix the username and password);
//   - so does one with fewer replicas in reach than min-replicas-to-write
//     asks (it failed the load, advising to grant the user what it had);
//   - a replica refuses every write for good: the load fails, saying to
//     point the store at the master; so does a replica that takes writes
//     (replica-read-only no), whose counts replication overwrites (it
//     loaded as ready, and two gateways, one on each, admitted the cap
//     twice);
//   - a server that knows a command the store sends under no such name
//     (rename-command): the load fails, naming it and saying so, never to
//     grant a permission (EVALSHA or TIME renamed loaded as ready, or as
//     unreachable, and under on_error allow every cap stayed off);
//   - a db the server does not have: the load fails, saying so;
//   - a server that speaks only TLS, reached without tls: the load fails,
//     saying to turn tls on (it loaded with "unreachable ... EOF", and under
//     on_error allow every cap stayed off).
func TestServerStatesAtStart(t *testing.T) {
	ctx := context.Background()

	t.Run("at maxmemory loads, with a warning", func(t *testing.T) {
		srv := redistest.Start(t)
		admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
		defer admin.Close()
		if err := admin.ConfigSet(ctx, "maxmemory", "1").Err(); err != nil {
			t.Fatal(err)
		}
		redisJSON := fmt.Sprintf(`{"addresses": [%q]}`, srv.Addr)
		h, err := loadWithRedis(t, redisJSON, OnErrorDeny)
		if err != nil {
			t.Fatalf("a Redis at maxmemory failed the load: %v", err)
		}
		logs := startCheckLogs(t, redisJSON, OnErrorDeny)
		warned := only(logs, zapcore.WarnLevel, "refuses writes at start")
		if len(warned) != 1 || !strings.Contains(fmt.Sprint(warned[0].ContextMap()["reason"]), "OOM") {
			t.Errorf("want one warning naming OOM; got %v", logs)
		}
		if ready := only(logs, zapcore.InfoLevel, "store ready"); len(ready) != 0 {
			t.Errorf("a store that refuses writes was logged ready: %v", ready)
		}
		if w := serve(t, h, `{"to": "alice"}`); w.Code != http.StatusServiceUnavailable {
			t.Errorf("on_error deny at maxmemory: %d", w.Code)
		}
		if err := admin.ConfigSet(ctx, "maxmemory", "0").Err(); err != nil {
			t.Fatal(err)
		}
		if w := serve(t, h, `{"to": "alice"}`); w.Code != http.StatusOK {
			t.Errorf("once memory is freed: %d", w.Code)
		}
	})

	t.Run("fewer replicas than min-replicas-to-write loads, with a warning", func(t *testing.T) {
		srv := redistest.Start(t, "--min-replicas-to-write", "1")
		redisJSON := fmt.Sprintf(`{"addresses": [%q]}`, srv.Addr)
		if _, err := loadWithRedis(t, redisJSON, OnErrorDeny); err != nil {
			t.Fatalf("a Redis waiting for a replica failed the load: %v", err)
		}
		logs := startCheckLogs(t, redisJSON, OnErrorDeny)
		warned := only(logs, zapcore.WarnLevel, "refuses writes at start")
		if len(warned) != 1 || !strings.Contains(fmt.Sprint(warned[0].ContextMap()["reason"]), "NOREPLICAS") {
			t.Errorf("want one warning naming NOREPLICAS; got %v", logs)
		}
	})

	master := redistest.Start(t)
	replica := redistest.Start(t, "--replicaof", "127.0.0.1", fmt.Sprint(master.Port))
	writable := redistest.Start(t, "--replicaof", "127.0.0.1", fmt.Sprint(master.Port), "--replica-read-only", "no")
	noEvalsha := redistest.Start(t, "--rename-command", "evalsha", "")
	noTime := redistest.Start(t, "--rename-command", "time", "")
	renamedEval := redistest.Start(t, "--rename-command", "eval", "eval_x")
	tlsOnly := redistest.StartTLS(t)
	for _, c := range []struct {
		name, redis string
		want        []string
		errorIs     error
	}{
		{"a replica", fmt.Sprintf(`{"addresses": [%q]}`, replica.Addr),
			[]string{"redis at " + replica.Addr, "READONLY", "point the store at the master"}, redisstore.ErrNoPermission},
		{"a replica that takes writes", fmt.Sprintf(`{"addresses": [%q]}`, writable.Addr),
			[]string{"redis at " + writable.Addr, "role:slave", "point the store at the master"}, redisstore.ErrNoPermission},
		{"EVALSHA disabled", fmt.Sprintf(`{"addresses": [%q]}`, noEvalsha.Addr),
			[]string{"redis at " + noEvalsha.Addr, "evalsha on keys rf:*: ERR unknown command", "remove its rename-command"}, redisstore.ErrNoPermission},
		{"TIME disabled", fmt.Sprintf(`{"addresses": [%q]}`, noTime.Addr),
			[]string{"redis at " + noTime.Addr, "time: ERR unknown command", "time (inside the store's scripts): ERR Unknown ", "remove its rename-command"}, redisstore.ErrNoPermission},
		{"EVAL renamed", fmt.Sprintf(`{"addresses": [%q]}`, renamedEval.Addr),
			[]string{"redis at " + renamedEval.Addr, "eval on keys rf:*: ERR unknown command", "remove its rename-command"}, redisstore.ErrNoPermission},
		{"a db the server does not have", fmt.Sprintf(`{"addresses": [%q], "db": 99}`, master.Addr),
			[]string{"redis at " + master.Addr, "DB index is out of range", "set db to a database the server has"}, redisstore.ErrNoPermission},
		{"a TLS server reached without tls", fmt.Sprintf(`{"addresses": [%q]}`, tlsOnly.Addr),
			[]string{"redis at " + tlsOnly.Addr, "speaks TLS", "turn tls on"}, redisstore.ErrTLSExpected},
		{"a TLS server in a redis:// url", fmt.Sprintf(`{"url": "redis://%s/0"}`, tlsOnly.Addr),
			[]string{"redis at " + tlsOnly.Addr, "speaks TLS", "turn tls on"}, redisstore.ErrTLSExpected},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := loadWithRedis(t, c.redis, OnErrorAllow)
			expectLoadRefused(t, err, c.want, "username and password", "grant the user")
			if !errors.Is(err, c.errorIs) {
				t.Errorf("the error is not %v: %v", c.errorIs, err)
			}
		})
	}

	t.Run("a TLS server reached with tls is not marked", func(t *testing.T) {
		if _, err := loadWithRedis(t, fmt.Sprintf(`{"addresses": [%q], "tls": true, "tls_ca": %q}`, tlsOnly.Addr, tlsOnly.CAFile), OnErrorAllow); err != nil {
			t.Fatal(err)
		}
	})
}

// expectLoadRefused fails t unless err is a load's error that says each
// of want and none of wrong (what would send the operator astray).
func expectLoadRefused(t *testing.T, err error, want []string, wrong ...string) {
	t.Helper()
	if err == nil {
		t.Fatal("the config loaded")
	}
	for _, w := range want {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("the error does not say %q: %v", w, err)
		}
	}
	for _, w := range wrong {
		if strings.Contains(err.Error(), w) {
			t.Errorf("the error says %q: %v", w, err)
		}
	}
	t.Logf("%v", err)
}

// A server the start check could not ask is asked again until it answers,
// and what it refuses is then logged at error, as a configuration error:
// a read-only replica, down at start, came up and refused every write,
// and only "store failing" lines said so while on_error decided every
// send. One that answers and refuses nothing is logged ready.
func TestStartCheckAgainOnceAnswered(t *testing.T) {
	master := redistest.Start(t)
	for _, c := range []struct {
		name string
		args []string
		want string
	}{
		{"a read-only replica", []string{"--replicaof", "127.0.0.1", fmt.Sprint(master.Port)}, "READONLY"},
		{"a server that takes writes", nil, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			srv := redistest.Start(t)
			srv.Stop()
			redisJSON := fmt.Sprintf(`{"addresses": [%q], "timeout": 200000000}`, srv.Addr)
			h, err := loadWithRedis(t, redisJSON, OnErrorAllow)
			if err != nil {
				t.Fatalf("a server down at start failed the load: %v", err)
			}
			cfg, _ := h.Redis.resolve(caddy.NewReplacer())
			s := h.redisStore()
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if check := s.CheckStart(ctx); !unanswered(check) {
				t.Fatalf("the server down answered: %+v", check)
			}
			core, logs := observer.New(zapcore.InfoLevel) // each wait is a debug line
			done := make(chan struct{})
			go func() {
				recheckWhenAnswered(ctx, zap.New(core), s, &cfg, h.storeFields(&cfg), 50*time.Millisecond)
				close(done)
			}()
			time.Sleep(150 * time.Millisecond)
			if logs.Len() != 0 {
				t.Fatalf("logged while the server was down: %v", logs.All())
			}
			srv.Restart(t, c.args...)
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("not checked again within 10 s of the server answering")
			}
			refused := only(logs.All(), zapcore.ErrorLevel, "refuses the gateway, found once it answered")
			ready := only(logs.All(), zapcore.InfoLevel, "store ready")
			switch {
			case c.want != "" && (len(refused) != 1 || !strings.Contains(fmt.Sprint(refused[0].ContextMap()["error"]), c.want)):
				t.Errorf("want one error naming %s; got %v", c.want, logs.All())
			case c.want == "" && (len(ready) != 1 || len(refused) != 0):
				t.Errorf("want the store logged ready; got %v", logs.All())
			}
		})
	}
}
