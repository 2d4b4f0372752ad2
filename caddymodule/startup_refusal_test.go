package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter/redisstore"
)

// loadWithRedis provisions the cap set "push" on the Redis that redisJSON
// (a JSON object) configures.
func loadWithRedis(t *testing.T, redisJSON, onError string) (*Handler, error) {
	t.Helper()
	return load(t, fmt.Sprintf(`{"name": "push", "redis": %s, "on_error": %q, "key_prefix": "rf:",
		"dimensions": {"r": "{json.to}"}, "rules": [{"name": "r", "by": ["r"], "limit": 5, "window": 60000000000}]}`, redisJSON, onError))
}

// gwRules are the ACL rules of the least-privilege user (docs/operations.md)
// on the prefix rf:, password secret.
var gwRules = []any{"on", ">secret", "~rf:*", "-@all", "+evalsha", "+eval", "+get", "+set", "+del", "+time", "+mget", "+command|docs"}

func setUser(t *testing.T, admin *redis.Client, user string, rules ...any) {
	t.Helper()
	if err := admin.Do(context.Background(), append([]any{"ACL", "SETUSER", user}, rules...)...).Err(); err != nil {
		t.Fatalf("ACL SETUSER %s on %s: %v", user, admin.Options().Addr, err)
	}
}

// A server that answers but refuses the login, or a command the store
// needs, or presents a certificate the gateway does not trust, fails the
// load, under every on_error, with an error naming the
// cap set, the address, the user and what the server said; a server that
// does not answer loads, with a warning, and on_error decides.
func TestStoreRefusalFailsLoad(t *testing.T) {
	srv := redistest.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	setUser(t, admin, "gw", gwRules...)
	setUser(t, admin, "noevalsha", append(append([]any{}, gwRules...), "-evalsha")...)
	locked := redistest.Start(t, "--requirepass", "secret")
	tlsOnly := redistest.StartTLS(t)

	for _, c := range []struct {
		name    string
		redis   string
		want    []string
		errorIs error
	}{
		{"wrong password", fmt.Sprintf(`{"addresses": [%q], "username": "gw", "password": "wrong"}`, srv.Addr),
			[]string{"frequency_cap push:", "redis at " + srv.Addr, `user "gw"`, "WRONGPASS "}, redisstore.ErrLoginRefused},
		{"wrong password in a url", fmt.Sprintf(`{"url": "redis://:wrongpass@%s"}`, locked.Addr),
			[]string{"frequency_cap push:", "redis at " + locked.Addr, "the default user", "WRONGPASS "}, redisstore.ErrLoginRefused},
		{"no password where required", fmt.Sprintf(`{"addresses": [%q]}`, locked.Addr),
			[]string{"frequency_cap push:", "redis at " + locked.Addr, "the default user", "NOAUTH "}, redisstore.ErrLoginRefused},
		{"a user without evalsha", fmt.Sprintf(`{"addresses": [%q], "username": "noevalsha", "password": "secret"}`, srv.Addr),
			[]string{"frequency_cap push:", "redis at " + srv.Addr, `user "noevalsha"`, "evalsha on keys rf:*", "NOPERM "}, redisstore.ErrNoPermission},
		{"a certificate from an unknown CA", fmt.Sprintf(`{"addresses": [%q], "tls": true}`, tlsOnly.Addr),
			[]string{"frequency_cap push:", "redis at " + tlsOnly.Addr, "certificate the gateway does not trust", "tls_ca", "unknown authority"}, redisstore.ErrUntrustedCertificate},
		{"a certificate for another name", fmt.Sprintf(`{"addresses": [%q], "tls": true, "tls_ca": %q, "tls_server_name": "elsewhere.example"}`, tlsOnly.Addr, tlsOnly.CAFile),
			[]string{"frequency_cap push:", "redis at " + tlsOnly.Addr, "tls_server_name", "elsewhere.example"}, redisstore.ErrUntrustedCertificate},
	} {
		for _, onError := range []string{OnErrorAllow, OnErrorDeny, OnErrorLocal} {
			t.Run(c.name+"/"+onError, func(t *testing.T) {
				_, err := loadWithRedis(t, c.redis, onError)
				if err == nil {
					t.Fatal("the config loaded")
				}
				for _, w := range c.want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("the error does not say %q: %v", w, err)
					}
				}
				if !errors.Is(err, c.errorIs) {
					t.Errorf("the error is not %v: %v", c.errorIs, err)
				}
				if strings.Contains(err.Error(), "wrongpass") || strings.Contains(err.Error(), `"wrong"`) {
					t.Errorf("the error shows the password: %v", err)
				}
				if onError == OnErrorAllow {
					t.Logf("%v", err)
				}
			})
		}
	}

	t.Run("the least-privilege user loads", func(t *testing.T) {
		if _, err := loadWithRedis(t, fmt.Sprintf(`{"addresses": [%q], "username": "gw", "password": "secret"}`, srv.Addr), OnErrorAllow); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("unreachable loads, bounded in time", func(t *testing.T) {
		down := redistest.Start(t)
		down.Stop()
		start := time.Now()
		h, err := loadWithRedis(t, fmt.Sprintf(`{"addresses": [%q]}`, down.Addr), OnErrorDeny)
		if err != nil {
			t.Fatalf("an unreachable store failed the load: %v", err)
		}
		if took := time.Since(start); took > startCheckTimeout+time.Second {
			t.Errorf("Provision took %s", took)
		}
		logs := startCheckLogs(t, fmt.Sprintf(`{"addresses": [%q]}`, down.Addr), OnErrorDeny)
		if w := only(logs, zapcore.WarnLevel, "unreachable at start"); len(w) != 1 {
			t.Errorf("want one warning; got %v", logs)
		}
		if w := serve(t, h, `{"to": "alice"}`); w.Code != http.StatusServiceUnavailable {
			t.Errorf("on_error deny while unreachable: %d", w.Code)
		}
	})
}

// On a cluster, ACL users are not copied between nodes: one master
// without the user would leave a third of the recipients uncapped, so
// that master's refusal fails the load, naming it.
func TestStoreRefusalFailsLoadCluster(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	masters := c.Masters(t)
	rules := append(append([]any{}, gwRules...), "+cluster|slots", "+asking")
	addrs := `"` + strings.Join(c.Addrs(), `", "`) + `"`
	cfg := fmt.Sprintf(`{"addresses": [%s], "cluster": true, "username": "gw", "password": "secret"}`, addrs)

	// No node knows the user: the slot map cannot even be read.
	_, err := loadWithRedis(t, cfg, OnErrorAllow)
	if err == nil || !strings.Contains(err.Error(), "redis at the cluster seeds "+c.Addrs()[0]) || !strings.Contains(err.Error(), "WRONGPASS ") {
		t.Fatalf("no node with the user: %v; want the load to fail naming the seeds", err)
	}
	t.Logf("%v", err)

	for _, m := range masters[1:] {
		setUser(t, m.Admin(), "gw", rules...)
	}
	_, err = loadWithRedis(t, cfg, OnErrorAllow)
	if err == nil || !strings.Contains(err.Error(), "redis at "+masters[0].Addr+` refused the login of user "gw"`) {
		t.Fatalf("one master without the user: %v; want the load to fail naming %s", err, masters[0].Addr)
	}
	for _, m := range masters[1:] {
		if strings.Contains(err.Error(), m.Addr) {
			t.Errorf("the error names %s, which let the user in: %v", m.Addr, err)
		}
	}
	t.Logf("%v", err)

	setUser(t, masters[0].Admin(), "gw", rules...)
	if _, err := loadWithRedis(t, cfg, OnErrorAllow); err != nil {
		t.Fatalf("with the user on every master: %v", err)
	}
}

// A sentinel's own login is configured by sentinel_username and
// sentinel_password; without it, or with a wrong one, the load fails
// naming the sentinel and its user, although go-redis calls a sentinel
// that refused "unreachable".
func TestStoreRefusalFailsLoadSentinel(t *testing.T) {
	st := redistest.StartSentinelWithAuth(t, "watcher", "s3cret")
	cfg := func(user, pass string) string {
		return fmt.Sprintf(`{"addresses": [%q], "sentinel_master": %q, "sentinel_username": %q, "sentinel_password": %q}`, st.Addr, st.MasterName, user, pass)
	}
	h, err := loadWithRedis(t, cfg("watcher", "s3cret"), OnErrorDeny)
	if err != nil {
		t.Fatalf("with the sentinel's login: %v", err)
	}
	if w := serve(t, h, `{"to": "alice"}`); w.Code != http.StatusOK {
		t.Fatalf("a send through the sentinel: %d", w.Code)
	}
	for _, c := range []struct {
		user, pass string
		want       []string
	}{
		{"", "", []string{"redis sentinel at " + st.Addr, "the default user", "NOAUTH "}},
		{"watcher", "wrong", []string{"redis sentinel at " + st.Addr, `user "watcher"`, "WRONGPASS "}},
	} {
		_, err := loadWithRedis(t, fmt.Sprintf(`{"addresses": [%q], "sentinel_master": %q, "sentinel_username": %q, "sentinel_password": %q}`, st.Addr, st.MasterName, c.user, c.pass), OnErrorAllow)
		if err == nil {
			t.Fatalf("sentinel login %q/%q: the config loaded", c.user, c.pass)
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("the error does not say %q: %v", w, err)
			}
		}
		t.Logf("%v", err)
	}
}

// sentinel_username and sentinel_password are Caddyfile subdirectives of
// redis, only beside sentinel_master.
func TestCaddyfileSentinelLogin(t *testing.T) {
	var h Handler
	err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(`frequency_cap {
		redis {
			address           10.0.0.1:26379
			sentinel_master   mymaster
			sentinel_username watcher
			sentinel_password {env.SENTINEL_PASSWORD}
		}
		dimension r {json.to}
		rule daily {
			by     r
			limit  50
			window 1d
		}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if c := h.Redis.Config; c.SentinelUsername != "watcher" || c.SentinelPassword != "{env.SENTINEL_PASSWORD}" {
		t.Errorf("parsed %+v", c)
	}
	err = new(Handler).UnmarshalCaddyfile(caddyfile.NewTestDispenser(`frequency_cap {
		redis {
			address           10.0.0.1:6379
			sentinel_password x
		}
	}`))
	if err == nil || !strings.Contains(err.Error(), "need sentinel_master") {
		t.Errorf("sentinel_password without sentinel_master: %v", err)
	}
}

// observedAll is observed with every store log of h going to the logs.
func observedAll(t *testing.T, cfg string) (*Handler, *observer.ObservedLogs) {
	t.Helper()
	h, logs := observed(t, cfg, time.Hour)
	h.locals.logger, h.warns.refusals.logger, h.outage.logger = h.logger, h.logger, h.logger
	return h, logs
}

// A refusal that begins after the start (here a rotated password) is
// logged at error, with its reason, at most once a minute while it
// lasts, each line counting the refusals since the last; it is counted in
// store_error_reasons_total{reason="no_permission"} every time, and not
// logged as an outage.
func TestLaterRefusalLoggedOnceAMinute(t *testing.T) {
	t.Run("once a minute", func(t *testing.T) {
		core, logs := observer.New(zapcore.DebugLevel)
		l := &refusalLog{logger: zap.New(core), handler: "push", onError: OnErrorAllow, interval: refusalInterval}
		err := fmt.Errorf("%w: WRONGPASS invalid username-password pair or user is disabled.", redisstore.ErrLoginRefused)
		t0 := time.Date(2026, 11, 27, 14, 0, 0, 0, time.UTC)
		for _, s := range []struct {
			at     time.Duration
			logged bool
		}{{0, true}, {time.Second, false}, {30 * time.Second, false}, {59 * time.Second, false}, {time.Minute, true}, {time.Minute + time.Second, false}, {3 * time.Minute, true}} {
			if got := l.add(t0.Add(s.at), opDecide, err); got != s.logged {
				t.Errorf("at %s: logged %v, want %v", s.at, got, s.logged)
			}
		}
		lines := logs.All()
		if len(lines) != 3 {
			t.Fatalf("want 3 lines; got %v", lines)
		}
		for i, want := range []int64{0, 3, 1} {
			f := lines[i].ContextMap()
			if lines[i].Level != zapcore.ErrorLevel || f["refused_since_last_line"] != want || f["reason"] != redisstore.ReasonPermission || f["refused"] != "login" {
				t.Errorf("line %d: %v %v; want error level, %d since the last, reason no_permission, refused login", i, lines[i].Level, f, want)
			}
		}
	})

	t.Run("a rotated password", func(t *testing.T) {
		srv := redistest.Start(t)
		admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
		defer admin.Close()
		setUser(t, admin, "gw", gwRules...)
		h, logs := observedAll(t, fmt.Sprintf(`{"name": "rotated", "redis": {"addresses": [%q], "username": "gw", "password": "secret"}, "key_prefix": "rf:",
			"dimensions": {"r": "{json.to}"}, "rules": [{"name": "r", "by": ["r"], "limit": 5, "window": 60000000000}]}`, srv.Addr))
		if w := serve(t, h, `{"to": "alice"}`); w.Code != http.StatusOK {
			t.Fatalf("before the rotation: %d", w.Code)
		}
		counter := storeReasonsVec().WithLabelValues("rotated", redisstore.ReasonPermission)
		before := counted(t, counter)
		setUser(t, admin, "gw", "resetpass", ">rotated")
		if err := admin.Do(context.Background(), "CLIENT", "KILL", "USER", "gw").Err(); err != nil {
			t.Fatal(err)
		}
		for i := 0; i < 6; i++ {
			if w := serve(t, h, `{"to": "alice"}`); w.Code != http.StatusOK {
				t.Fatalf("under on_error allow: %d", w.Code)
			}
		}
		refused := counted(t, counter) - before
		errs := only(logs.All(), zapcore.ErrorLevel, "refuses the gateway")
		if refused < 4 || len(errs) != 1 {
			t.Fatalf("counted %v refusals, logged %d error lines; want at least 4 and 1: %v", refused, len(errs), logs.All())
		}
		if f := errs[0].ContextMap(); f["reason"] != redisstore.ReasonPermission || !strings.Contains(fmt.Sprint(f["error"]), "WRONGPASS") {
			t.Errorf("the line says %v", f)
		}
		for _, e := range only(logs.All(), zapcore.WarnLevel, "store failing") {
			if e.ContextMap()["reason"] == redisstore.ReasonPermission {
				t.Errorf("a refusal was logged as an outage: %v", e)
			}
		}
	})
}

// When the store answers after failing, one line at info says how long
// it failed and how many decisions on_error took meanwhile.
func TestStoreAnswersAgainLogged(t *testing.T) {
	t.Run("times", func(t *testing.T) {
		core, logs := observer.New(zapcore.DebugLevel)
		o := &storeOutage{logger: zap.New(core), handler: "push"}
		t0 := time.Date(2026, 11, 27, 14, 0, 0, 0, time.UTC)
		at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
		o.answered(t0, t0) // nothing failed: no line
		o.failed(at(1), OnErrorAllow)
		o.failed(at(2), OnErrorAllow)
		// A call made before the first failure was seen, answered after
		// it: it says nothing of the store since (the outage would have
		// a negative length), so the outage goes on.
		o.answered(at(0.5), at(2.5))
		o.failed(at(3), OnErrorDeny)
		o.failed(at(4), OnErrorLocal)
		o.failed(at(5), "")
		o.answered(at(10), at(11))
		o.answered(at(11), at(12)) // answered already: no line
		lines := logs.All()
		if len(lines) != 1 {
			t.Fatalf("want one line; got %v", lines)
		}
		f := lines[0].ContextMap()
		if lines[0].Level != zapcore.InfoLevel || f["failed_for"] != 10*time.Second || f["on_error_allowed"] != int64(2) || f["on_error_denied"] != int64(1) || f["on_error_local"] != int64(1) {
			t.Errorf("the line: %v %v", lines[0].Level, f)
		}
		o.failed(at(20), OnErrorDeny)
		o.answered(at(20.5), at(21))
		if f := logs.All()[1].ContextMap(); f["failed_for"] != time.Second || f["on_error_denied"] != int64(1) || f["on_error_allowed"] != int64(0) {
			t.Errorf("the second outage: %v", f)
		}
	})

	// A config replaced during an outage says what on_error decided in
	// it so far: a probe's reload in the middle of an outage left the 3
	// sends allowed before it in no line (the new config's line said 2).
	t.Run("replaced while failing", func(t *testing.T) {
		core, logs := observer.New(zapcore.DebugLevel)
		o := &storeOutage{logger: zap.New(core), handler: "push"}
		t0 := time.Date(2026, 11, 27, 14, 0, 0, 0, time.UTC)
		for i := range 3 {
			o.failed(t0.Add(time.Duration(i)*time.Second), OnErrorAllow)
		}
		o.stop(t0.Add(5 * time.Second))
		o.stop(t0.Add(6 * time.Second)) // said already
		lines := logs.All()
		if len(lines) != 1 || lines[0].Level != zapcore.WarnLevel || !strings.Contains(lines[0].Message, "still failing") {
			t.Fatalf("want one warning; got %v", lines)
		}
		if f := lines[0].ContextMap(); f["failed_for"] != 5*time.Second || f["on_error_allowed"] != int64(3) {
			t.Errorf("the line: %v", f)
		}
	})

	// A store that flaps ends many outages in an interval: one line says
	// so at once, the next sums the rest at the interval's end (before,
	// each outage wrote a line, and its failures another: a probe cutting
	// the store's connections every 5ms logged 56 warnings in a second).
	t.Run("flapping", func(t *testing.T) {
		core, logs := observer.New(zapcore.DebugLevel)
		warns := &storeWarnings{logger: zap.New(core), handler: "push", onError: OnErrorAllow, interval: 50 * time.Millisecond}
		o := &storeOutage{logger: zap.New(core), handler: "push", interval: 50 * time.Millisecond, warnings: []*storeWarnings{warns}}
		for i := 0; i < 100; i++ {
			fail := time.Now()
			warns.addAt(fail, opDecide, errors.New("connection reset"))
			o.failed(fail, OnErrorAllow)
			o.answered(fail.Add(time.Nanosecond), fail.Add(2*time.Nanosecond))
		}
		time.Sleep(150 * time.Millisecond)
		o.stop(time.Now())
		warns.stop()
		var outages, allowed, failures int64
		lines := 0
		all := logs.All()
		if n := len(all); n == 0 || all[n-1].Message != "frequency cap store answers again" {
			t.Errorf("the last line is not the store answering: %v", all)
		}
		for _, e := range all {
			f := e.ContextMap()
			lines++
			if e.Message == "frequency cap store answers again" {
				n, ok := f["outages"].(int64)
				if !ok {
					n = 1
				}
				outages += n
				allowed += f["on_error_allowed"].(int64)
			} else {
				failures += f["failures"].(int64)
			}
		}
		if outages != 100 || allowed != 100 || failures != 100 || lines > 6 {
			t.Errorf("%d lines for 100 outages: they say %d outages, %d allowed, %d failures; want every one counted in at most 6 lines", lines, outages, allowed, failures)
		}
	})

	for _, c := range []struct {
		onError string
		field   string
		code    int
	}{
		{OnErrorAllow, "on_error_allowed", http.StatusOK},
		{OnErrorDeny, "on_error_denied", http.StatusServiceUnavailable},
		{OnErrorLocal, "on_error_local", http.StatusOK},
	} {
		t.Run(c.onError, func(t *testing.T) {
			srv := redistest.Start(t)
			h, logs := observedAll(t, fmt.Sprintf(`{"name": "again", "redis": {"addresses": [%q]}, "on_error": %q, "key_prefix": "rf:",
				"dimensions": {"r": "{json.to}"}, "rules": [{"name": "r", "by": ["r"], "limit": 50, "window": 60000000000}]}`, srv.Addr, c.onError))
			if w := serve(t, h, `{"to": "alice"}`); w.Code != http.StatusOK {
				t.Fatalf("before: %d", w.Code)
			}
			srv.Stop()
			for i := 0; i < 3; i++ {
				if w := serve(t, h, `{"to": "alice"}`); w.Code != c.code {
					t.Fatalf("while down: %d, want %d", w.Code, c.code)
				}
			}
			srv.Restart(t)
			// Until the store answers: a send fails at once while the
			// restarted server is not reachable yet (under deny, 20 of
			// them took 30 ms, before it was).
			var again []observer.LoggedEntry
			for deadline := time.Now().Add(5 * time.Second); len(again) == 0 && time.Now().Before(deadline); {
				serve(t, h, `{"to": "alice"}`)
				if again = only(logs.All(), zapcore.InfoLevel, "answers again"); len(again) == 0 {
					time.Sleep(20 * time.Millisecond)
				}
			}
			if len(again) != 1 {
				t.Fatalf("want one line; got %v", logs.All())
			}
			// At least the 3 sends while down; a send just after the
			// restart may fail too (a pooled connection found dead).
			f := again[0].ContextMap()
			took, _ := f[c.field].(int64)
			if took < 3 || f["failed_for"].(time.Duration) <= 0 {
				t.Errorf("the line says %v; want %s at least 3", f, c.field)
			}
			// The outage's failure lines all come before it, whole: its
			// last line is the store answering, not a warning.
			time.Sleep(warnInterval + 200*time.Millisecond)
			var failures int64
			answeredAt := -1
			for i, e := range logs.All() {
				switch {
				case strings.Contains(e.Message, "answers again"):
					answeredAt = i
				case strings.HasPrefix(e.Message, "frequency cap store failing"):
					if answeredAt >= 0 {
						t.Errorf("a failure line after the store answered: %v", e.ContextMap())
					}
					failures += e.ContextMap()["failures"].(int64)
				}
			}
			if failures != took {
				t.Errorf("the failure lines count %d failures, the answering line %d", failures, took)
			}
		})
	}
}

// TestOutageLengthSpansReloads proves that the "answers again" line of
// an outage that reloads cut into parts says how long the store failed
// in all, from the first failure, whichever config saw it first: a probe's
// 6.1 s outage across 24 reloads read 0.5 s, the last config's share.
func TestOutageLengthSpansReloads(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 14, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	for _, tc := range []struct {
		name        string
		newFailsAt  float64 // the new config's first failure
		unloadOldAt float64
	}{
		{"the old config unloaded before the new one fails", 3, 2},
		{"the new config failing before the old one is unloaded", 1.5, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			core, logs := observer.New(zapcore.DebugLevel)
			name := "reloaded-" + tc.name
			old := &storeOutage{logger: zap.New(core), handler: name}
			cur := &storeOutage{logger: zap.New(core), handler: name}
			old.failed(at(1), OnErrorAllow)
			if tc.newFailsAt < tc.unloadOldAt {
				cur.failed(at(tc.newFailsAt), OnErrorAllow)
				old.stop(at(tc.unloadOldAt))
			} else {
				old.stop(at(tc.unloadOldAt))
				cur.failed(at(tc.newFailsAt), OnErrorAllow)
			}
			cur.answered(at(6), at(7))
			again := logs.FilterMessage("frequency cap store answers again").All()
			if len(again) != 1 || again[0].ContextMap()["failed_for"] != 6*time.Second {
				t.Errorf("lines %v; want one saying 6s", logs.All())
			}
		})
	}
}
