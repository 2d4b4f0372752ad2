package redisstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// refusalsOf runs the start check as the Caddy module does (the
// sentinels first, then the store) and returns its refusals.
func refusalsOf(t *testing.T, cfg Config) (StartCheck, []*RefusedError) {
	t.Helper()
	s, _ := newConfiguredStore(t, cfg, "freqcap:")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	check := s.CheckStart(ctx)
	check.Nodes = append(cfg.CheckSentinels(ctx), check.Nodes...)
	return check, check.Refusals()
}

// A server that answers and refuses the login or a command the store
// needs is a refusal of the start check, named by node and told by the
// error's type; one that does not answer is not.
func TestStartCheckRefusals(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	if err := aclSetUser(ctx, admin, "gw", leastPrivilege(false)...); err != nil {
		t.Fatal(err)
	}
	base := Config{Addresses: []string{srv.Addr}, Username: "gw", Password: "secret", Timeout: time.Second}

	if _, rs := refusalsOf(t, base); len(rs) != 0 {
		t.Fatalf("the least-privilege user was refused: %v", rs)
	}

	login := func(t *testing.T, cfg Config, node, code string) {
		t.Helper()
		check, rs := refusalsOf(t, cfg)
		if len(rs) != 1 || rs[0].Node != node || rs[0].Login == nil || !strings.HasPrefix(rs[0].Login.Error(), code) {
			t.Fatalf("want one %s refusal by %s; got %v (check %+v)", code, node, rs, check)
		}
		if !errors.Is(rs[0], ErrLoginRefused) || errors.Is(rs[0], ErrNoPermission) {
			t.Errorf("%v: not ErrLoginRefused alone", rs[0])
		}
		t.Logf("%v", rs[0])
	}
	t.Run("wrong password", func(t *testing.T) {
		cfg := base
		cfg.Password = "wrong"
		login(t, cfg, srv.Addr, "WRONGPASS ")
	})
	locked := redistest.Start(t, "--requirepass", "secret")
	t.Run("wrong password in a url", func(t *testing.T) {
		login(t, Config{URL: "redis://:wrongpass@" + locked.Addr, Timeout: time.Second}, locked.Addr, "WRONGPASS ")
	})
	t.Run("no password where one is required", func(t *testing.T) {
		login(t, Config{Addresses: []string{locked.Addr}, Timeout: time.Second}, locked.Addr, "NOAUTH ")
	})
	t.Run("a user without evalsha", func(t *testing.T) {
		if err := aclSetUser(ctx, admin, "gw2", append(leastPrivilege(false), "-evalsha")...); err != nil {
			t.Fatal(err)
		}
		cfg := base
		cfg.Username = "gw2"
		_, rs := refusalsOf(t, cfg)
		if len(rs) != 1 || rs[0].Login != nil || len(rs[0].Refused) != 1 || rs[0].Refused[0].Command != "evalsha" {
			t.Fatalf("want evalsha refused; got %v", rs)
		}
		if !errors.Is(rs[0], ErrNoPermission) {
			t.Errorf("%v: not ErrNoPermission", rs[0])
		}
		t.Logf("%v", rs[0])
	})
	t.Run("unreachable", func(t *testing.T) {
		down := redistest.Start(t)
		down.Stop()
		check, rs := refusalsOf(t, Config{Addresses: []string{down.Addr}, Timeout: 100 * time.Millisecond})
		if len(rs) != 0 || check.Err == nil {
			t.Fatalf("an unreachable server: refusals %v, error %v; want none and an error", rs, check.Err)
		}
	})
}

// ACL users are not copied between a cluster's nodes: a master without
// the user refuses the login while the others let it in, and the check
// names that master.
func TestStartCheckRefusalsCluster(t *testing.T) {
	ctx := context.Background()
	c := redistest.StartCluster(t, 3, 0)
	masters := c.Masters(t)
	for _, m := range masters[1:] {
		if err := aclSetUser(ctx, m.Admin(), "gw", leastPrivilege(true)...); err != nil {
			t.Fatal(err)
		}
	}
	check, rs := refusalsOf(t, Config{Addresses: c.Addrs(), Cluster: true, Username: "gw", Password: "secret", Timeout: time.Second})
	if len(rs) != 1 || rs[0].Node != masters[0].Addr || rs[0].Login == nil {
		t.Fatalf("want the login refused by %s alone; got %v (check %+v)", masters[0].Addr, rs, check)
	}
	t.Logf("%v", rs[0])
}

// A sentinel with a login of its own: the store reaches the master with
// the sentinel credentials, and without them, or with wrong ones, the
// check names the sentinel that refused, although go-redis's own error
// calls every sentinel "unreachable".
func TestStartCheckRefusalsSentinel(t *testing.T) {
	st := redistest.StartSentinelWithAuth(t, "watcher", "s3cret")
	base := Config{Addresses: []string{st.Addr}, SentinelMaster: st.MasterName, SentinelUsername: "watcher", SentinelPassword: "s3cret", Timeout: time.Second}

	check, rs := refusalsOf(t, base)
	if len(rs) != 0 || check.Err != nil {
		t.Fatalf("with the sentinel's login: refusals %v, error %v", rs, check.Err)
	}
	if n := check.Nodes[0]; !n.Sentinel || n.Server != "master "+st.Master.Addr {
		t.Errorf("the sentinel's node: %+v; want it to name master %s", n, st.Master.Addr)
	}
	s, _ := newConfiguredStore(t, base, "freqcap:")
	seedRound(t, s, "alice")

	t.Run("the master refuses", func(t *testing.T) {
		cfg := base
		cfg.Username, cfg.Password = "nobody", "x"
		check, rs := refusalsOf(t, cfg)
		if len(rs) != 1 || rs[0].Sentinel || rs[0].Node != st.Master.Addr || rs[0].Login == nil || !strings.HasPrefix(rs[0].Login.Error(), "WRONGPASS ") {
			t.Fatalf("want WRONGPASS by the master %s; got %v (check %+v)", st.Master.Addr, rs, check)
		}
		t.Logf("%v", rs[0])
	})

	for _, c := range []struct {
		name       string
		user, pass string
		code       string
	}{
		{"no sentinel login", "", "", "NOAUTH "},
		{"wrong sentinel password", "watcher", "wrong", "WRONGPASS "},
	} {
		t.Run(c.name, func(t *testing.T) {
			cfg := base
			cfg.SentinelUsername, cfg.SentinelPassword = c.user, c.pass
			check, rs := refusalsOf(t, cfg)
			if len(rs) != 1 || !rs[0].Sentinel || rs[0].Node != st.Addr || rs[0].Login == nil || !strings.HasPrefix(rs[0].Login.Error(), c.code) {
				t.Fatalf("want %s by the sentinel %s; got %v (check %+v)", c.code, st.Addr, rs, check)
			}
			// The store's own call fails with go-redis's "all sentinels
			// ... unreachable", which holds the refusal: classified so.
			s, _ := newConfiguredStore(t, cfg, "freqcap:")
			_, err := s.Decide(context.Background(), limitertest.Req(time.Time{}, limitertest.Vals{"recipient": "bob", "content": "hi"}, limitertest.SeedRules()...))
			if !errors.Is(err, ErrLoginRefused) || Reason(err) != ReasonPermission {
				t.Errorf("a decision through the refusing sentinel: %v (reason %q); want ErrLoginRefused", err, Reason(err))
			}
			t.Logf("%v; the decision: %v", rs[0], err)
		})
	}
}

// A refusal that begins after the store started fails decisions with the
// sentinel error of its kind, reason no_permission: a command taken away
// (EVALSHA itself, or SET inside the script) ErrNoPermission; a password
// changed (the connections closed, as they are when a user is deleted or
// a server restarts) ErrLoginRefused.
func TestLaterRefusalsClassified(t *testing.T) {
	ctx := context.Background()
	srv := redistest.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	if err := aclSetUser(ctx, admin, "gw", leastPrivilege(false)...); err != nil {
		t.Fatal(err)
	}
	s, _ := newConfiguredStore(t, Config{Addresses: []string{srv.Addr}, Username: "gw", Password: "secret", Timeout: time.Second}, "freqcap:")
	seedRound(t, s, "alice")
	decide := func(want error) {
		t.Helper()
		var err error
		for i := 0; i < 5 && !errors.Is(err, want); i++ {
			_, err = s.Decide(ctx, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": "bob", "content": "hi"}, limitertest.SeedRules()...))
		}
		if !errors.Is(err, want) || Reason(err) != ReasonPermission || !IsRefusal(err) {
			t.Fatalf("got %v (reason %q); want %v", err, Reason(err), want)
		}
		t.Logf("%v", err)
	}
	for _, take := range []string{"-evalsha", "-set"} {
		if err := aclSetUser(ctx, admin, "gw", append(append([]string{"reset"}, leastPrivilege(false)...), take)...); err != nil {
			t.Fatal(err)
		}
		decide(ErrNoPermission)
	}
	if err := aclSetUser(ctx, admin, "gw", append([]string{"reset"}, leastPrivilege(false)...)...); err != nil {
		t.Fatal(err)
	}
	seedRound(t, s, "carol")
	if err := aclSetUser(ctx, admin, "gw", "resetpass", ">rotated"); err != nil {
		t.Fatal(err)
	}
	if err := admin.Do(ctx, "CLIENT", "KILL", "USER", "gw").Err(); err != nil {
		t.Fatal(err)
	}
	decide(ErrLoginRefused)
}
