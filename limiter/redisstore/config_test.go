package redisstore

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// newConfiguredStore builds the client from cfg as the Caddy module does and
// a store on it; both are closed at test end.
func newConfiguredStore(t *testing.T, cfg Config, prefix string) (*Store, redis.UniversalClient) {
	t.Helper()
	client, err := cfg.NewClient()
	if err != nil {
		t.Fatalf("NewClient(%+v): %v", cfg, err)
	}
	t.Cleanup(func() { client.Close() })
	s := New(client, Options{Prefix: prefix, Timeout: cfg.EffectiveTimeout()})
	t.Cleanup(func() { s.Close() })
	return s, client
}

// seedRound sends three identical messages to who with the seed config: the
// first two are admitted, the third is denied by same_content_59s. It also
// checks that a refund gives one back and that Reset forgets the content
// log, so every script op runs through the configured client.
func seedRound(t *testing.T, s limiter.Store, who string) {
	t.Helper()
	ctx := context.Background()
	r := limitertest.Req(time.Time{}, limitertest.Vals{"recipient": who, "content": "hi"}, limitertest.SeedRules()...)
	var id string
	for i := 0; i < 3; i++ {
		d, err := s.Decide(ctx, r)
		if err != nil {
			t.Fatalf("decision %d for %s: %v", i, who, err)
		}
		if want := i < 2; d.Allowed != want {
			t.Fatalf("decision %d for %s: allowed %v, want %v", i, who, d.Allowed, want)
		}
		if i == 0 {
			id = d.ID()
		}
	}
	if ok, err := s.Refund(ctx, id); err != nil || !ok {
		t.Fatalf("refund: %v %v", ok, err)
	}
	d, err := s.Usage(ctx, r)
	if err != nil {
		t.Fatal(err)
	}
	if d.Results[0].Used != 1 || d.Results[2].Used != 1 {
		t.Fatalf("after a refund: used %d and %d, want 1 and 1", d.Results[0].Used, d.Results[2].Used)
	}
	if err := s.Reset(ctx, r); err != nil {
		t.Fatalf("reset: %v", err)
	}
}

// The Sentinel configuration (addresses = the sentinel, sentinel_master)
// reaches the master the sentinel names, and keeps working after the
// sentinel promotes the replica: decisions move to the new master by
// themselves, and the history recorded before the failover (replicated)
// still counts there. The test reports how many decisions the old master
// took after the promotion: those are lost when it resyncs.
func TestRedisConfigSentinel(t *testing.T) {
	st := redistest.StartSentinel(t)
	cfg := Config{Addresses: []string{st.Addr}, SentinelMaster: st.MasterName, Timeout: 500 * time.Millisecond}
	s, _ := newConfiguredStore(t, cfg, "sent:")
	seedRound(t, s, "alice")

	ctx := context.Background()
	rules := limitertest.SeedRules()
	r := limitertest.Req(time.Time{}, limitertest.Vals{"recipient": "bob", "content": "news"}, rules...)
	for i := 0; i < 2; i++ {
		if d, err := s.Decide(ctx, r); err != nil || !d.Allowed {
			t.Fatalf("decision %d before the failover: %v %v", i, d, err)
		}
	}
	master := redis.NewClient(&redis.Options{Addr: st.Master.Addr})
	defer master.Close()
	if n := master.Exists(ctx, limiter.KeyFor("sent:", "recipient", "bob")).Val(); n != 1 {
		t.Fatalf("bob's key is not on the master the sentinel names")
	}
	// Wait for the replica to hold the writes, as a failover needs them.
	// WAIT counts the replicas that hold this connection's own writes; on
	// a connection that has written nothing it may return at once (Valkey
	// 8.0.1 did, under load, and the promoted replica lacked bob's key in
	// 3 runs of 20): a write of its own, after the store's in the one
	// replication stream, makes it wait for theirs.
	if err := master.Set(ctx, "sentinel-test:barrier", "1", time.Minute).Err(); err != nil {
		t.Fatal(err)
	}
	if n, err := master.Wait(ctx, 1, 5*time.Second).Result(); err != nil || n != 1 {
		t.Fatalf("WAIT for the replica: %d %v", n, err)
	}

	took := st.Failover(t)
	var failed int
	start := time.Now()
	for {
		if _, err := s.Usage(ctx, r); err == nil {
			break
		}
		failed++
		if time.Since(start) > 10*time.Second {
			t.Fatal("no call succeeded within 10 s of the failover")
		}
		time.Sleep(20 * time.Millisecond)
	}
	recovered := time.Since(start)
	// The old master still takes writes until the sentinel turns it into a
	// replica (at its next poll, up to 10 s on); the client moves to the
	// new master when the sentinel announces +switch-master. Decisions in
	// between land on the old master and are lost when it resyncs.
	newMaster := redis.NewClient(&redis.Options{Addr: st.Master.Addr})
	defer newMaster.Close()
	onOld := 0
	for i := 0; ; i++ {
		who := fmt.Sprint("probe", i)
		d, err := s.Decide(ctx, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": who, "content": "x"}, rules...))
		if err == nil && d.Allowed && newMaster.Exists(ctx, limiter.KeyFor("sent:", "recipient", who)).Val() == 1 {
			break
		}
		if err == nil {
			onOld++
		}
		if time.Since(start) > 15*time.Second {
			t.Fatalf("decisions did not reach the promoted master %s within 15 s of the failover", st.Master.Addr)
		}
		time.Sleep(5 * time.Millisecond)
	}
	moved := time.Since(start)
	// The history recorded before the failover reached the new master.
	if d, err := s.Decide(ctx, r); err != nil || d.Allowed {
		t.Fatalf("third identical message after the failover: %v %v; want denied, from the replicated history", d, err)
	}
	seedRound(t, s, "carol")
	t.Logf("sentinel failover took %s; first call after it succeeded %s later (after %d failed attempts); decisions reached the new master %s later, %d decisions admitted by the old master in between",
		took, recovered.Round(time.Millisecond), failed, moved.Round(time.Millisecond), onOld)
}

// tls + tls_ca: the store talks to a TLS-only server whose certificate
// comes from a CA the test made, by addresses and by a rediss:// URL.
// Without the CA, or to the TLS port without TLS, decisions fail with the
// store's sentinel errors rather than hanging or panicking, and a
// certificate the client does not trust (no CA, another server name) is a
// refusal at start, which fails the load: waiting does not mend it.
func TestRedisConfigTLS(t *testing.T) {
	srv := redistest.StartTLS(t)
	t.Run("addresses", func(t *testing.T) {
		s, _ := newConfiguredStore(t, Config{Addresses: []string{srv.Addr}, TLS: true, TLSCA: srv.CAFile, Timeout: time.Second}, "tls:")
		seedRound(t, s, "alice")
	})
	t.Run("url", func(t *testing.T) {
		s, _ := newConfiguredStore(t, Config{URL: "rediss://" + srv.Addr + "/0", TLSCA: srv.CAFile, Timeout: time.Second}, "tlsurl:")
		seedRound(t, s, "bob")
	})
	t.Run("server name", func(t *testing.T) {
		port := srv.Addr[strings.LastIndexByte(srv.Addr, ':'):]
		s, _ := newConfiguredStore(t, Config{Addresses: []string{"localhost" + port}, TLS: true, TLSCA: srv.CAFile, TLSServerName: "localhost", Timeout: time.Second}, "tlsname:")
		seedRound(t, s, "carol")
	})
	for _, c := range []struct {
		name      string
		cfg       Config
		untrusted bool
	}{
		{"unknown CA", Config{Addresses: []string{srv.Addr}, TLS: true, Timeout: time.Second}, true},
		{"wrong server name", Config{Addresses: []string{srv.Addr}, TLS: true, TLSCA: srv.CAFile, TLSServerName: "elsewhere.example", Timeout: time.Second}, true},
		{"plain text", Config{Addresses: []string{srv.Addr}, Timeout: 300 * time.Millisecond}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, _ := newConfiguredStore(t, c.cfg, "tlsbad:")
			_, err := s.Decide(context.Background(), limitertest.Req(time.Time{}, limitertest.Vals{"recipient": "x", "content": "y"}, limitertest.SeedRules()...))
			if err == nil || !(errors.Is(err, limiter.ErrStore) || errors.Is(err, limiter.ErrTimeout)) {
				t.Fatalf("decide: %v; want ErrStore or ErrTimeout", err)
			}
			t.Logf("fails as it should: %v", err)
			rs := s.CheckStart(context.Background()).Refusals()
			switch {
			case c.untrusted && (len(rs) != 1 || !errors.Is(rs[0], ErrUntrustedCertificate)):
				t.Errorf("start check refusals %v; want the untrusted certificate", rs)
			case !c.untrusted && len(rs) != 0:
				t.Errorf("start check refusals %v; want none (no TLS at all looks down)", rs)
			}
			if len(rs) == 1 {
				t.Logf("refused at start: %v", rs[0])
			}
		})
	}
	if _, err := (&Config{Addresses: []string{srv.Addr}, TLS: true, TLSCA: srv.CAFile + ".missing"}).NewClient(); err == nil {
		t.Fatal("NewClient accepted a missing tls_ca file")
	}
}

// aclRules are the ACL rules a gateway's user needs: MGET and TIME (the
// reads of decisions made in Go), EVALSHA, and EVAL for when the script
// cache is empty (a restart, SCRIPT FLUSH, a new master), and what the
// scripts call through redis.call, which Redis checks against the same
// user: GET, SET, DEL, TIME. Keys are limited to the prefix. HELLO
// and AUTH run before the user is authenticated and need no rule; go-redis
// ignores a refused CLIENT SETINFO.
var aclRules = []string{"on", ">secret", "~freqcap:*", "-@all", "+evalsha", "+eval", "+get", "+set", "+del", "+time", "+mget", "+command|docs"}

// An ACL user restricted to the key prefix and the commands above: every
// store operation works with it (also after SCRIPT FLUSH, through EVAL),
// and the user can touch no key outside the prefix, neither directly nor
// through a script, and run no other command, in a script or not. (Inside
// the prefix it can GET, SET and DEL directly: Redis 7 ACLs cannot tell a
// script's calls from the user's own.) A store configured with another
// prefix fails with ErrStore.
func TestRedisConfigACL(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer admin.Close()
	if err := aclSetUser(ctx, admin, "gw", aclRules...); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	admin.Set(ctx, "other:secret", "42", 0)

	cfg := Config{Addresses: []string{srv.Addr}, Username: "gw", Password: "secret", Timeout: time.Second}
	s, client := newConfiguredStore(t, cfg, "freqcap:")
	seedRound(t, s, "alice")
	if err := admin.ScriptFlush(ctx).Err(); err != nil {
		t.Fatal(err)
	}
	seedRound(t, s, "bob") // EVALSHA gets NOSCRIPT, EVAL loads it again

	// Each refusal must be an ACL refusal of what the case touches: a key
	// (servers do not name it) or the command named (when the server names
	// it: Redis 7.0 does not inside a script).
	const key = "" // want: a key refused
	denied := []struct {
		what string
		err  error
		want string // key, or the command refused as the server names it
	}{
		{"GET outside the prefix", client.Get(ctx, "other:secret").Err(), key},
		{"SET outside the prefix", client.Set(ctx, "other:x", "1", 0).Err(), key},
		{"script GET outside the prefix", client.Eval(ctx, "return redis.call('GET', KEYS[1])", []string{"other:secret"}).Err(), key},
		{"script GET of an undeclared key", client.Eval(ctx, "return redis.call('GET', 'other:secret')", []string{"freqcap:x"}).Err(), key},
		{"script DEL outside the prefix", client.Eval(ctx, "return redis.call('DEL', 'other:secret')", nil).Err(), key},
		{"script INCR inside the prefix", client.Eval(ctx, "return redis.call('INCR', KEYS[1])", []string{"freqcap:x"}).Err(), "incr"},
		{"KEYS", client.Keys(ctx, "*").Err(), "keys"},
		{"FLUSHALL", client.FlushAll(ctx).Err(), "flushall"},
		{"CONFIG GET", client.ConfigGet(ctx, "*").Err(), "config|get"},
		{"SCRIPT FLUSH", client.ScriptFlush(ctx).Err(), "script|flush"},
	}
	for _, d := range denied {
		r, ok := aclRefusalOf(d.err)
		switch {
		case !ok:
			t.Errorf("%s: %v; want an ACL refusal", d.what, d.err)
		case d.want == key && !r.key:
			t.Errorf("%s: %v; want the key refused", d.what, d.err)
		case d.want != key && (r.key || (r.command != "" && r.command != d.want)):
			t.Errorf("%s: %v; want the command %q refused", d.what, d.err, d.want)
		}
	}
	if v := admin.Get(ctx, "other:secret").Val(); v != "42" {
		t.Fatalf("a key outside the prefix changed: %q", v)
	}

	other, _ := newConfiguredStore(t, cfg, "other:")
	_, err := other.Decide(ctx, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": "x", "content": "y"}, limitertest.SeedRules()...))
	if r, ok := aclRefusalOf(err); !errors.Is(err, limiter.ErrStore) || !ok || !r.key {
		t.Fatalf("a store outside the user's prefix: %v; want ErrStore with its keys refused", err)
	}

	// A wrong password is refused, as a store error.
	bad, _ := newConfiguredStore(t, Config{Addresses: []string{srv.Addr}, Username: "gw", Password: "wrong", Timeout: time.Second}, "freqcap:")
	if _, err := bad.Decide(ctx, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": "x", "content": "y"}, limitertest.SeedRules()...)); !errors.Is(err, limiter.ErrStore) {
		t.Fatalf("wrong password: %v; want ErrStore", err)
	}
}

// serverWithSelectingUser starts a server with the ACL user gw (password
// secret), restricted as aclRules say and allowed to SELECT a database,
// and returns it with an admin client closed at the test's end.
func serverWithSelectingUser(t *testing.T) (*redistest.Server, *redis.Client) {
	srv := redistest.Start(t)
	admin := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { admin.Close() })
	if err := aclSetUser(context.Background(), admin, "gw", append(aclRules, "+select")...); err != nil {
		t.Fatalf("ACL SETUSER: %v", err)
	}
	return srv, admin
}

// A redis://user:pass@host:port/db URL selects the user and the database:
// the records land in database 3 and nowhere else. (A user on a database
// other than 0 also needs +select.)
func TestRedisConfigURL(t *testing.T) {
	srv, admin := serverWithSelectingUser(t)
	ctx := context.Background()
	url := fmt.Sprintf("redis://gw:secret@%s/3", srv.Addr)
	s, _ := newConfiguredStore(t, Config{URL: url, Timeout: time.Second}, "freqcap:")
	seedRound(t, s, "alice")
	if _, err := s.Decide(ctx, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": "bob", "content": "hi"}, limitertest.SeedRules()...)); err != nil {
		t.Fatal(err)
	}
	sizes := map[int]int64{}
	for _, db := range []int{0, 3} {
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, DB: db})
		sizes[db] = c.DBSize(ctx).Val()
		c.Close()
	}
	if sizes[3] == 0 || sizes[0] != 0 {
		t.Fatalf("keys per database %v; want them in 3 only", sizes)
	}
	// Without +select the user cannot use database 3: every decision fails.
	if err := admin.Do(ctx, "ACL", "SETUSER", "gw", "-select").Err(); err != nil {
		t.Fatal(err)
	}
	s2, _ := newConfiguredStore(t, Config{URL: url, Timeout: time.Second}, "freqcap:")
	if _, err := s2.Decide(ctx, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": "carol", "content": "hi"}, limitertest.SeedRules()...)); !errors.Is(err, limiter.ErrStore) {
		t.Fatalf("database 3 without +select: %v; want ErrStore", err)
	}
}

// Username, password and db beside a URL fill in what the URL leaves
// out (a password kept apart from the URL, read from a secret): the
// store logs in with them and counts in that database. Before, the URL
// won silently: the login failed as if no password had been given, and
// with a password in the URL the records went to database 0. A field
// that differs from what the URL says is refused, naming the field and
// never the values.
func TestRedisConfigURLFilledIn(t *testing.T) {
	srv, admin := serverWithSelectingUser(t)
	ctx := context.Background()
	for _, cfg := range []Config{
		{URL: "redis://" + srv.Addr, Username: "gw", Password: "secret", DB: 4},
		{URL: "redis://gw@" + srv.Addr + "/4", Password: "secret"},
		{URL: "redis://gw:secret@" + srv.Addr, DB: 4},
	} {
		cfg.Timeout = time.Second
		s, _ := newConfiguredStore(t, cfg, "freqcap:")
		if _, err := s.Decide(ctx, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": "bob", "content": "hi"}, limitertest.SeedRules()...)); err != nil {
			t.Fatalf("%+v: %v", cfg, err)
		}
		c := redis.NewClient(&redis.Options{Addr: srv.Addr, DB: 4})
		n := c.DBSize(ctx).Val()
		c.FlushDB(ctx)
		c.Close()
		if n == 0 || admin.DBSize(ctx).Val() != 0 {
			t.Fatalf("%+v: %d keys in database 4, %d in 0; want them in 4 only", cfg, n, admin.DBSize(ctx).Val())
		}
	}
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{URL: "redis://gw:secret@" + srv.Addr, Password: "other"}, "the url and password each give a password, and they differ"},
		{Config{URL: "redis://gw@" + srv.Addr, Username: "ops"}, "the url and username each give a username, and they differ"},
		{Config{URL: "redis://" + srv.Addr + "/2", DB: 4}, "the url selects database 2 and db 4"},
		{Config{URL: "redis://" + srv.Addr + "/0", DB: 4}, "the url selects database 0 and db 4"},
		{Config{URL: "redis://" + srv.Addr + "?db=2", DB: 4}, "the url selects database 2 and db 4"},
		{Config{URL: "redis://" + srv.Addr + "?db=0", DB: 4}, "the url selects database 0 and db 4"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "secret") || strings.Contains(err.Error(), "other") {
			t.Errorf("%+v: %v, want %q, and neither password", tc.cfg, err, tc.want)
		}
	}
}

// aclRefusal is what a server's ACL refused: a key (servers do not say
// which) or a command (named, except by Redis 7.0 inside a script).
type aclRefusal struct {
	key     bool
	command string // as the server names it ("config|get"), or ""
}

// aclRefusalMarkers start an ACL refusal in an error's text, however the
// store wrapped it: the NOPERM error code of a refused command or key, and
// the ERR a script fails with when a redis.call inside it is refused, in
// Redis 8 and Valkey 8 ("ACL failure in script: " and the NOPERM reason)
// and in Redis 7.0 (its own sentences).
var aclRefusalMarkers = []string{"NOPERM ", "ACL failure in script: ", "The user executing the script can't "}

var (
	// A command, named: "this user has no permissions to run the 'keys'
	// command" (Redis 7.0), "User gw has no permissions to run the 'keys'
	// command" (Redis 8, Valkey 8), also inside a script.
	aclCommandNamed = regexp.MustCompile(`(?i)no permissions? to run the '([^']+)' command`)
	// A command, unnamed: "can't run this command or subcommand" (Redis 7.0
	// inside a script).
	aclCommandUnnamed = regexp.MustCompile(`(?i)can't run this command`)
	// A key: "no permissions to access one of the keys used as arguments"
	// (Redis 7.0), "No permissions to access a key" (Redis 8, Valkey 8),
	// "can't access at least one of the keys mentioned in the command
	// arguments" (Redis 7.0 inside a script).
	aclKey = regexp.MustCompile(`(?i)(permissions? to access|can't access) (a|one of the|at least one of the) keys?\b`)
)

// aclRefusalOf finds an ACL refusal in err and says what it refused; ok is
// false when err is nil, is no ACL refusal, or refuses something this
// function cannot name (a new wording: teach it rather than loosen it).
func aclRefusalOf(err error) (r aclRefusal, ok bool) {
	if err == nil {
		return r, false
	}
	m := err.Error()
	at := -1
	for _, mark := range aclRefusalMarkers {
		if i := strings.Index(m, mark); i >= 0 && (at < 0 || i < at) {
			at = i
		}
	}
	if at < 0 {
		return r, false
	}
	reason := m[at:]
	if c := aclCommandNamed.FindStringSubmatch(reason); c != nil {
		return aclRefusal{command: strings.ToLower(c[1])}, true
	}
	if aclCommandUnnamed.MatchString(reason) {
		return aclRefusal{}, true
	}
	if aclKey.MatchString(reason) {
		return aclRefusal{key: true}, true
	}
	return r, false
}

func aclSetUser(ctx context.Context, admin *redis.Client, user string, rules ...string) error {
	args := []any{"ACL", "SETUSER", user}
	for _, r := range rules {
		args = append(args, r)
	}
	return admin.Do(ctx, args...).Err()
}

// aclRefusalOf reads the refusals of every server the tests run against
// (as they answered TestRedisConfigACL's cases, wrapped as the store wraps
// them) and nothing else.
func TestACLRefusalWordings(t *testing.T) {
	const sha = " script: 61636018f4e6b5817b89791bbed242f93fa089e3, on @user_script:1."
	cases := []struct {
		msg     string
		ok, key bool
		command string
	}{
		// Redis 7.0
		{msg: "NOPERM this user has no permissions to access one of the keys used as arguments", ok: true, key: true},
		{msg: "frequency cap store failed: NOPERM this user has no permissions to access one of the keys used as arguments", ok: true, key: true},
		{msg: "ERR The user executing the script can't access at least one of the keys mentioned in the command arguments" + sha, ok: true, key: true},
		{msg: "ERR The user executing the script can't run this command or subcommand" + sha, ok: true},
		{msg: "NOPERM this user has no permissions to run the 'config|get' command", ok: true, command: "config|get"},
		// Redis 8.0, Valkey 8.0 and 8.1
		{msg: "NOPERM No permissions to access a key", ok: true, key: true},
		{msg: "frequency cap store failed: NOPERM No permissions to access a key", ok: true, key: true},
		{msg: "ERR ACL failure in script: No permissions to access a key" + sha, ok: true, key: true},
		{msg: "ERR ACL failure in script: User gw has no permissions to run the 'incr' command" + sha, ok: true, command: "incr"},
		{msg: "NOPERM User gw has no permissions to run the 'keys' command", ok: true, command: "keys"},
		// Not ACL refusals, or ones whose object is unknown.
		{msg: "ERR Wrong number of args calling Redis command from script" + sha},
		{msg: "WRONGPASS invalid username-password pair or user is disabled."},
		{msg: "NOSCRIPT No matching script. Please use EVAL."},
		{msg: "ERR unknown command 'incr', with args beginning with: "},
		{msg: "NOPERM No permissions to access a channel"},
		{msg: "ERR no permissions to run the 'incr' command"}, // no ACL marker
	}
	for _, c := range cases {
		r, ok := aclRefusalOf(errors.New(c.msg))
		if ok != c.ok || r.key != c.key || r.command != c.command {
			t.Errorf("%q: %+v, %v; want {key:%v command:%q}, %v", c.msg, r, ok, c.key, c.command, c.ok)
		}
	}
	if _, ok := aclRefusalOf(nil); ok {
		t.Error("nil is an ACL refusal")
	}
}

// TestConfigTLSSettingsNeedTLS proves that tls_ca, tls_server_name and
// tls_insecure_skip_verify without tls (or a rediss:// url) are a config
// error: ignored, the connection would be plain while the config reads
// as verified.
func TestConfigTLSSettingsNeedTLS(t *testing.T) {
	for _, c := range []Config{
		{Addresses: []string{"127.0.0.1:6379"}, TLSCA: "/etc/ca.pem"},
		{Addresses: []string{"127.0.0.1:6379"}, TLSServerName: "redis.internal"},
		{URL: "redis://127.0.0.1:6379/0", TLSInsecureSkipVerify: true},
	} {
		if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "need tls") {
			t.Errorf("%+v: %v, want an error saying they need tls", c, err)
		}
	}
	for _, c := range []Config{
		{Addresses: []string{"127.0.0.1:6379"}, TLS: true, TLSCA: "/etc/ca.pem"},
		{URL: "rediss://127.0.0.1:6379/0", TLSServerName: "redis.internal"},
	} {
		if err := c.Validate(); err != nil {
			t.Errorf("%+v: %v", c, err)
		}
	}
}

// A URL that does not parse is refused without its password in the
// error, whatever in the password derailed the parse.
func TestCheckURLHidesThePassword(t *testing.T) {
	for _, raw := range []string{"redis://:Top/Secret9@127.0.0.1:6379/0", "redis://ann:Top#Secret9@127.0.0.1:6379", "rediss://ann:Top%zSecret9@h:1/0", "redis://ann:Top:Sec?ret9@h:1"} {
		err := CheckURL(raw)
		if err == nil {
			t.Errorf("%s: parsed", raw)
			continue
		}
		if strings.Contains(err.Error(), "Top") || strings.Contains(err.Error(), "Secret9") || strings.Contains(err.Error(), "ret9") {
			t.Errorf("%s: the error shows the password: %v", raw, err)
		}
	}
	// A URL that parses and that go-redis refuses keeps go-redis's
	// reason, which names no password.
	for raw, want := range map[string]string{
		"redis://:s3cret@h:1/abc":               "invalid database number",
		"http://ann:s3cret@h:1":                 "invalid URL scheme",
		"redis://ann:s3cret@h:1?dial_timeout=x": "dial_timeout",
	} {
		err := CheckURL(raw)
		if err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "percent-encoded") {
			t.Errorf("%s: %v, want go-redis's reason %q without the password", raw, err, want)
		}
	}
	if err := CheckURL("redis://ann:s3cret@127.0.0.1:6379/2"); err != nil {
		t.Errorf("a good URL: %v", err)
	}
	if err := CheckURL("redis://127.0.0.1:port"); err == nil || !strings.Contains(err.Error(), "port") {
		t.Errorf("a URL without a password keeps its error: %v", err)
	}
}

// TestConfigAddressesADialCanReach proves that an address no dial can
// reach is refused when the config loads, in addresses and in a URL alike:
// a port out of range or not a number, a URL pasted as an address, a
// second port, a database below 0. A probe loaded each as a server down,
// and under on_error allow every send then passed uncapped.
func TestConfigAddressesADialCanReach(t *testing.T) {
	for _, c := range []struct {
		cfg  Config
		want string // "" for valid
	}{
		{Config{Addresses: []string{"127.0.0.1:6379"}}, ""},
		{Config{Addresses: []string{"[::1]:6379"}}, ""},
		{Config{Addresses: []string{"[fe80::1%eth0]:6379"}}, ""},
		{Config{URL: "redis://[fe80::1%25eth0]:6379/0"}, ""},
		{Config{Addresses: []string{"redis.internal:6379"}}, ""},
		{Config{URL: "redis://127.0.0.1:6379/2"}, ""},
		{Config{URL: "unix:///run/redis.sock"}, ""},
		{Config{Addresses: []string{"127.0.0.1:99999"}}, "not a number from 1 to 65535"},
		{Config{Addresses: []string{"127.0.0.1:0"}}, "not a number from 1 to 65535"},
		{Config{Addresses: []string{"127.0.0.1:6379x"}}, "not a number from 1 to 65535"},
		{Config{Addresses: []string{"127.0.0.1:6379:6379"}}, "is not host:port"},
		{Config{Addresses: []string{"redis://127.0.0.1:6379"}}, "is a URL"},
		{Config{Addresses: []string{"redis"}}, "has no port"},
		{Config{URL: "redis://127.0.0.1:99999"}, "not a number from 1 to 65535"},
		{Config{URL: "redis://127.0.0.1:6379:6379"}, "is not host:port"},
		{Config{URL: "redis://127.0.0.1:6379/-1"}, "database -1"},
	} {
		err := c.cfg.Validate()
		if c.want == "" && err != nil || c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)) {
			t.Errorf("%+v: %v; want %q", c.cfg, err, c.want)
		}
	}
}
