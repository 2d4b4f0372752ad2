package redisstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Config says how to reach Redis: standalone, Sentinel or Cluster,
// through one go-redis UniversalClient.
type Config struct {
	// URL is a redis:// or rediss:// URL (standalone). When set, the
	// address and TLS come from it, and the user, password and database
	// too where it names them: Username, Password and DB fill in what it
	// leaves out (a password kept apart from the URL), and one that says
	// otherwise than the URL is an error.
	// Options in its query are held to bounds: a pool_size from 1 to
	// 10000, durations of at least 1ms (or -1 where go-redis reads that as
	// off), a client_name Redis accepts, a database named once; the
	// options the store sets itself (timeouts, retries, skip_verify) are
	// refused. PoolSize beside a URL that also gives one, differently, is
	// an error too.
	URL string `json:"url,omitempty"`
	// Addresses are host:port pairs: the server, the cluster seed nodes, or
	// the sentinels. Default 127.0.0.1:6379.
	Addresses []string `json:"addresses,omitempty"`
	// Cluster makes the addresses seed nodes of a Redis Cluster.
	Cluster bool `json:"cluster,omitempty"`
	// SentinelMaster names the master that the sentinels at Addresses watch.
	SentinelMaster string `json:"sentinel_master,omitempty"`
	// Username and Password authenticate (ACL user or requirepass) with
	// the data nodes: the server, the master and replicas Sentinel names,
	// or every node of a cluster. None by default.
	Username string `json:"username,omitempty"`
	Password string `json:"password,omitempty"`
	// SentinelUsername and SentinelPassword authenticate with the
	// sentinels themselves (a sentinel's requirepass, or an ACL user on
	// it), which need not be the data nodes' user. Only with
	// SentinelMaster. None by default: the sentinels are asked without a
	// login.
	SentinelUsername string `json:"sentinel_username,omitempty"`
	SentinelPassword string `json:"sentinel_password,omitempty"`
	// DB selects the database (standalone and Sentinel only). Default 0.
	DB int `json:"db,omitempty"`
	// TLS turns TLS on. Default off.
	TLS bool `json:"tls,omitempty"`
	// TLSCA is a PEM file of CAs that verify the server; default: the
	// system roots.
	TLSCA string `json:"tls_ca,omitempty"`
	// TLSServerName overrides the name the certificate is checked against.
	TLSServerName string `json:"tls_server_name,omitempty"`
	// TLSInsecureSkipVerify turns certificate checks off. For tests only.
	TLSInsecureSkipVerify bool `json:"tls_insecure_skip_verify,omitempty"`
	// Timeout bounds every decision's call to Redis: a decision never waits
	// longer. Default 100ms.
	Timeout time.Duration `json:"timeout,omitempty"`
	// DialTimeout bounds opening a connection. Default: Timeout.
	DialTimeout time.Duration `json:"dial_timeout,omitempty"`
	// PoolSize is the most connections per node, from 1 to 10000
	// (MaxPoolSize). Default: the URL's pool_size, else go-redis's (10 per
	// CPU).
	PoolSize int `json:"pool_size,omitempty"`
	// ScriptOnly decides every batch in freqcap.lua, in one round trip,
	// instead of in Go between a read and a compare-and-set write (two),
	// at four to five times the Redis CPU a decision (see
	// Options.ScriptOnly and docs/performance.md). Default off; worth
	// it where a round trip costs more than Redis's CPU (a distant Redis).
	// On a cluster it turns off the masters' lanes too: every decision
	// then runs freqcap.lua on the master of its keys.
	ScriptOnly bool `json:"script_only,omitempty"`
	// NoNativeWrite writes the decisions made in Go with lua/commit.lua
	// even on a node that has SET … IFEQ (Options.NoNativeWrite): a
	// switch to keep the script's write while a new server build is
	// tried. Default off: a node that has SET … IFEQ is written with it.
	NoNativeWrite bool `json:"no_native_write,omitempty"`

	// dialer, when set, opens the client's connections (tests break them).
	dialer func(ctx context.Context, network, addr string) (net.Conn, error)
}

// addresses are the addresses the config dials first: its url's host, or
// Addresses (the default when none).
func (c *Config) addresses() []string {
	if c.URL != "" {
		if opt, err := c.URLOptions(); err == nil {
			return []string{opt.Addr}
		}
		return nil
	}
	if len(c.Addresses) == 0 {
		return []string{"127.0.0.1:6379"}
	}
	return c.Addresses
}

// DefaultTimeout is Config.Timeout's default.
const DefaultTimeout = 100 * time.Millisecond

// EffectiveTimeout is Timeout or its default.
func (c *Config) EffectiveTimeout() time.Duration {
	if c.Timeout > 0 {
		return c.Timeout
	}
	return DefaultTimeout
}

// Validate checks the fields without connecting.
func (c *Config) Validate() error {
	if c.URL != "" {
		if err := CheckURL(c.URL); err != nil {
			return fmt.Errorf("redis url: %w", err)
		}
		if len(c.Addresses) > 0 || c.Cluster || c.SentinelMaster != "" {
			return fmt.Errorf("redis: url cannot be combined with addresses, cluster or sentinel_master")
		}
		opt, err := c.URLOptions()
		if err != nil {
			return err
		}
		if err := CheckAddress(opt.Addr); err != nil {
			return fmt.Errorf("redis url: %w", err)
		}
	}
	if c.Cluster && c.SentinelMaster != "" {
		return fmt.Errorf("redis: cluster and sentinel_master exclude each other")
	}
	if c.Cluster && c.DB != 0 {
		return fmt.Errorf("redis: a cluster has only database 0")
	}
	if len(c.Addresses) > 1 && !c.Cluster && c.SentinelMaster == "" {
		return ErrAddressesNeedTopology
	}
	if (c.SentinelUsername != "" || c.SentinelPassword != "") && c.SentinelMaster == "" {
		return fmt.Errorf("redis: sentinel_username and sentinel_password need sentinel_master")
	}
	if c.Timeout < 0 || c.DialTimeout < 0 || c.PoolSize < 0 || c.DB < 0 {
		return fmt.Errorf("redis: timeouts, pool_size and db must not be negative")
	}
	if c.PoolSize != 0 {
		if err := CheckPoolSize(c.PoolSize); err != nil {
			return fmt.Errorf("redis %w", err)
		}
	}
	if err := CheckTimeout("timeout", c.Timeout); err != nil {
		return err
	}
	if err := CheckTimeout("dial_timeout", c.DialTimeout); err != nil {
		return err
	}
	for _, a := range c.Addresses {
		if err := CheckAddress(a); err != nil {
			return fmt.Errorf("redis: %w", err)
		}
	}
	// TLS settings without TLS would be ignored: the connection would be
	// plain while the config reads as verified.
	if (c.TLSCA != "" || c.TLSServerName != "" || c.TLSInsecureSkipVerify) && !c.TLS && !strings.HasPrefix(c.URL, "rediss://") {
		return fmt.Errorf("redis: tls_ca, tls_server_name and tls_insecure_skip_verify need tls (or a rediss:// url)")
	}
	return nil
}

// CheckAddress refuses an address no dial can reach, whatever the network
// does: one without a port, with a port that is not a number from 1 to
// 65535, or that is a URL (a scheme's colon). Such an address loaded as a
// server down, and on_error allow then passed every send uncapped. A unix
// socket's path (as a URL gives it) is left alone.
func CheckAddress(a string) error {
	if strings.HasPrefix(a, "/") {
		return nil
	}
	if strings.Contains(a, "://") {
		return fmt.Errorf("address %q is a URL: give host:port, or the URL as url", a)
	}
	if !strings.Contains(a, ":") {
		return fmt.Errorf("address %q has no port", a)
	}
	host, port, err := net.SplitHostPort(a)
	if _, perr := netip.ParseAddr(host); err == nil && strings.Contains(host, ":") && perr != nil {
		err = errors.New("a host with a colon is an IPv6 address") // a url's "h:1:2" comes as "[h:1]:2"
	}
	if err != nil {
		return fmt.Errorf("address %q is not host:port: %v", a, err)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("address %q: the port is not a number from 1 to 65535", a)
	}
	return nil
}

// NewClient builds the client. It does not connect: the first command does,
// so a gateway starts even while Redis is down. Commands honour context
// deadlines, and read and write timeouts equal Timeout.
func (c *Config) NewClient() (redis.UniversalClient, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	timeout := c.EffectiveTimeout()
	dial := c.DialTimeout
	if dial == 0 {
		dial = timeout
	}
	if c.URL != "" {
		opt, err := c.URLOptions()
		if err != nil {
			return nil, err
		}
		opt.ContextTimeoutEnabled = true
		opt.ReadTimeout, opt.WriteTimeout, opt.DialTimeout = timeout, timeout, dial
		opt.MaxRetries, opt.DialerRetries, opt.DialerRetryTimeout = failFast()
		if c.PoolSize > 0 {
			opt.PoolSize = c.PoolSize
		}
		if opt.TLSConfig != nil || c.TLS {
			tc, err := c.tlsConfig()
			if err != nil {
				return nil, err
			}
			opt.TLSConfig = tc
		}
		return gateClient(redis.NewClient(opt), time.Now), nil
	}
	opt := &redis.UniversalOptions{
		Addrs:                 c.addresses(),
		MasterName:            c.SentinelMaster,
		Username:              c.Username,
		Password:              c.Password,
		SentinelUsername:      c.SentinelUsername,
		SentinelPassword:      c.SentinelPassword,
		DB:                    c.DB,
		DialTimeout:           dial,
		ReadTimeout:           timeout,
		WriteTimeout:          timeout,
		PoolSize:              c.PoolSize,
		ContextTimeoutEnabled: true,
		IsClusterMode:         c.Cluster,
	}
	opt.MaxRetries, opt.DialerRetries, opt.DialerRetryTimeout = failFast()
	opt.Dialer = c.dialer
	if c.Cluster {
		// go-redis tries a refused command (CLUSTERDOWN, TRYAGAIN) again
		// on the node its slot map names, up to MaxRedirects times, with
		// back-offs of 10 ms to 1 s: three of them outlast a decision's
		// timeout. Short ones leave the time to the store's own retries,
		// which have the map reloaded first (refusals.go).
		opt.MinRetryBackoff, opt.MaxRetryBackoff = time.Millisecond, 4*time.Millisecond
	}
	if c.TLS {
		tc, err := c.tlsConfig()
		if err != nil {
			return nil, err
		}
		opt.TLSConfig = tc
	}
	if c.Cluster {
		co := opt.Cluster()
		// The store sends only commands on the keys of one slot (scripts
		// and their pipelines), so go-redis's routing policies add
		// nothing; they read the command table (COMMAND) on first use,
		// and for a least-privilege user, who may not, go-redis asks
		// again before every command, a round trip and a log line each.
		co.DisableRoutingPolicies = true
		// Each node's client has a dial gate of its own (dialgate.go).
		co.NewClient = func(o *redis.Options) *redis.Client {
			return gateClient(redis.NewClient(o), time.Now).(*redis.Client)
		}
		return redis.NewClusterClient(co), nil
	}
	return gateClient(redis.NewUniversalClient(opt), time.Now), nil
}

// failFast turns go-redis's retries down: a decision has a budget of
// Timeout, and with retries (and their backoff) a refused connection would
// use all of it instead of failing at once and letting on_error decide.
// Cluster redirections (MOVED, ASK) are followed all the same.
func failFast() (maxRetries, dialerRetries int, dialerBackoff time.Duration) {
	return -1, 1, time.Millisecond
}

func (c *Config) tlsConfig() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.TLSServerName, InsecureSkipVerify: c.TLSInsecureSkipVerify}
	if c.TLSCA != "" {
		pem, err := os.ReadFile(c.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("redis tls_ca: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("redis tls_ca %s: no PEM certificates", c.TLSCA)
		}
		tc.RootCAs = pool
	}
	return tc, nil
}

// ErrAddressesNeedTopology refuses several addresses that say neither
// what they are: go-redis would take them for a cluster's seed nodes,
// while the store treated them as one server.
var ErrAddressesNeedTopology = errors.New("redis: several addresses are a cluster's nodes (add cluster) or sentinels (add sentinel_master); a single server has one address")

// CheckURL parses a redis:// or rediss:// URL, and says what is wrong
// with one that does not parse without quoting its password: url.Parse's
// error quotes the URL, and a password with a / or # in it derails the
// parse into quoting parts of it.
func CheckURL(raw string) error {
	_, err := parseURL(raw)
	if err == nil {
		return nil
	}
	scheme, rest, ok := strings.Cut(raw, "://")
	at := strings.LastIndexByte(rest, '@')
	if !ok || at < 0 {
		return fmt.Errorf("%q: %w", raw, err) // no userinfo to hide
	}
	hidden := scheme + "://<user and password hidden>@" + rest[at+1:]
	if _, perr := url.Parse(raw); perr == nil {
		// go-redis refused a URL that parses (a scheme, a db, an
		// option): its reason names no password.
		return fmt.Errorf("%s: %w", hidden, err)
	}
	return fmt.Errorf("%s does not parse as a URL; a password with / # ? %% @ or : in it must be percent-encoded there, or given with the password subdirective (JSON: password)", hidden)
}

// KeySpace names the keys a store of this config writes under prefix,
// however the config spells its server: a URL or an address, localhost
// or 127.0.0.1, addresses in any order. Two configs of one key space
// count in the same keys.
func (c *Config) KeySpace(prefix string) string {
	db := c.DB
	if c.URL != "" {
		if opt, err := c.URLOptions(); err == nil {
			db = opt.DB
		}
	}
	addrs := slices.Clone(c.addresses())
	for i, a := range addrs {
		host, port, err := net.SplitHostPort(a)
		if err != nil {
			continue
		}
		host = strings.ToLower(host)
		if host == "localhost" || host == "::1" {
			host = "127.0.0.1"
		}
		addrs[i] = net.JoinHostPort(host, port)
	}
	slices.Sort(addrs)
	return fmt.Sprintf("redis|%s|%d|%s|%s", c.SentinelMaster, db, strings.Join(addrs, ","), prefix)
}

// URLOptions are the client options of URL, with Username, Password and
// DB filling in what the URL leaves out. A field that the URL also gives,
// differently, is an error: which of the two was meant cannot be told,
// and taking either would log in as, or count in, what the other says.
// The errors name the fields, never their values.
func (c *Config) URLOptions() (*redis.Options, error) {
	opt, err := parseURL(c.URL)
	if err != nil {
		return nil, err
	}
	// The URL's pool_size is at least 1 when given (checkURLOptions).
	if c.PoolSize != 0 && opt.PoolSize != 0 && opt.PoolSize != c.PoolSize {
		return nil, fmt.Errorf("redis: the url and pool_size each give a pool size, and they differ; give it once")
	}
	for _, f := range []struct {
		name    string
		field   string
		fromURL *string
	}{{"username", c.Username, &opt.Username}, {"password", c.Password, &opt.Password}} {
		switch {
		case f.field == "":
		case *f.fromURL == "":
			*f.fromURL = f.field
		case *f.fromURL != f.field:
			return nil, fmt.Errorf("redis: the url and %s each give a %s, and they differ; give it once", f.name, f.name)
		}
	}
	if c.DB != 0 {
		if urlNamesDB(c.URL) && opt.DB != c.DB {
			return nil, fmt.Errorf("redis: the url selects database %d and db %d; give it once", opt.DB, c.DB)
		}
		opt.DB = c.DB
	}
	return opt, nil
}

// CheckTimeout refuses a timeout (name) set under a millisecond: no call
// to Redis finishes that fast, so every call would fail and on_error
// decide every request. It is a unit mistake: in a JSON config a number
// is nanoseconds ("timeout": 100 is 100ns). 0 is the default.
func CheckTimeout(name string, d time.Duration) error {
	if d > 0 && d < time.Millisecond {
		return fmt.Errorf("redis %s %s is under 1ms, too short for any call to Redis to finish, so every call would fail: write a duration such as \"100ms\" (in a JSON config, a bare number is nanoseconds)", name, d)
	}
	return nil
}

// urlNamesDB reports whether a URL that redis.ParseURL took names a
// database: redis://host/3, redis://host/0 and redis://host?db=2 do (as
// unix:///path?db=2), redis://host does not.
func urlNamesDB(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	return u.Query().Has("db") || u.Scheme != "unix" && strings.Trim(u.Path, "/") != ""
}

// MaxPoolSize bounds pool_size, in the config and in a URL's query.
// go-redis sizes a pool's structures to PoolSize as it builds the client,
// before any connection opens: 100000000 took about 28 GB and the process
// with it, and 2147483648 panicked. 10000 is what one Redis serves by
// default (maxclients), so a larger pool per node could never fill.
const MaxPoolSize = 10000

// CheckPoolSize refuses a pool size outside 1..MaxPoolSize. The error
// starts with "pool_size", for the caller to say where it was given.
func CheckPoolSize(n int) error {
	if n < 1 || n > MaxPoolSize {
		return fmt.Errorf("pool_size %d is not a number from 1 to %d", n, MaxPoolSize)
	}
	return nil
}

// maxURLBufferSize bounds a URL's pipeline buffer sizes: each pipeline
// connection holds one of each, and go-redis's own notes find no gain past
// 128 KiB and a loss from 512 KiB.
const maxURLBufferSize = 1 << 20

// urlDurations are the duration options of a URL's query, and whether
// go-redis documents -1 for the option as turning it off. go-redis reads
// every value of 0 and below as -1, so only -1 is taken as written.
var urlDurations = []struct {
	name string
	off  bool
}{
	{"pool_timeout", false},
	{"conn_max_idle_time", true}, {"idle_timeout", true},
	{"conn_max_lifetime", true}, {"max_conn_age", true}, {"conn_max_lifetime_jitter", true},
}

// urlOverridden are the options of a URL's query that the store sets
// itself, and what to write instead: given in the URL they were dropped
// without a word (a self-signed server's skip_verify failed every call,
// which on_error allow passed uncapped).
var urlOverridden = []struct{ name, instead string }{
	{"read_timeout", "the redis block's timeout bounds every call"},
	{"write_timeout", "the redis block's timeout bounds every call"},
	{"dial_timeout", "write dial_timeout in the redis block"},
	{"max_retries", "the store never retries a call: a retry would outlast timeout"},
	{"min_retry_backoff", "the store never retries a call: a retry would outlast timeout"},
	{"max_retry_backoff", "the store never retries a call: a retry would outlast timeout"},
	{"skip_verify", "write tls_insecure_skip_verify in the redis block"},
}

// parseURL is redis.ParseURL with the options its query sets checked
// (checkURLOptions), so that a client is never built with them unchecked.
func parseURL(raw string) (*redis.Options, error) {
	opt, err := redis.ParseURL(raw)
	if err != nil {
		return nil, err
	}
	u, err := url.Parse(raw) // redis.ParseURL took it, so this does too
	if err != nil {
		return nil, err
	}
	if err := checkURLOptions(u, opt); err != nil {
		return nil, err
	}
	return opt, nil
}

// checkURLOptions refuses what a URL (u, which redis.ParseURL read into
// opt) sets that would fail at load without a config error, fail every
// connection later (which reads as a server down, and on_error allow then
// passes every send uncapped), or count somewhere other than the config
// reads: an option given twice (go-redis takes the last one silently), a
// database given in the path and the query differently or below 0, a
// client name Redis refuses, a protocol other than RESP 2 or 3, pool and
// buffer sizes out of range, and durations under 1ms other than the -1
// that go-redis documents as off. The errors name the option.
func checkURLOptions(u *url.URL, opt *redis.Options) error {
	q := u.Query()
	for _, name := range slices.Sorted(maps.Keys(q)) {
		if n := len(q[name]); n > 1 {
			return fmt.Errorf("option %s is given %d times; give it once", name, n)
		}
	}
	if u.Scheme != "unix" && q.Get("db") != "" {
		if f := strings.FieldsFunc(u.Path, func(r rune) bool { return r == '/' }); len(f) == 1 {
			if path, err := strconv.Atoi(f[0]); err == nil && path != opt.DB {
				return fmt.Errorf("the url selects database %d in its path and %d in its query (db); give it once", path, opt.DB)
			}
		}
	}
	if opt.DB < 0 {
		return fmt.Errorf("database %d: a database is a number from 0", opt.DB)
	}
	// Redis's own rule (CLIENT SETNAME): no spaces, newlines or special
	// characters.
	if i := strings.IndexFunc(opt.ClientName, func(r rune) bool { return r < '!' || r > '~' }); i >= 0 {
		return fmt.Errorf("option client_name %q: Redis refuses a name with spaces, newlines or characters other than '!' to '~', and every connection would fail", opt.ClientName)
	}
	for _, o := range urlOverridden {
		if q.Has(o.name) {
			return fmt.Errorf("option %s is the store's own: %s", o.name, o.instead)
		}
	}
	// A blank value is go-redis's default, as the option left out.
	if q.Get("protocol") != "" && opt.Protocol != 2 && opt.Protocol != 3 {
		return fmt.Errorf("option protocol %d: go-redis speaks RESP 2 or 3", opt.Protocol)
	}
	if q.Get("pool_size") != "" {
		if err := CheckPoolSize(opt.PoolSize); err != nil {
			return fmt.Errorf("option %w", err)
		}
	}
	for _, c := range []struct {
		name string
		n    int
	}{{"min_idle_conns", opt.MinIdleConns}, {"max_idle_conns", opt.MaxIdleConns}, {"max_active_conns", opt.MaxActiveConns}, {"max_concurrent_dials", opt.MaxConcurrentDials}} {
		if c.n < 0 || c.n > MaxPoolSize {
			return fmt.Errorf("option %s %d is not a number from 0 to %d", c.name, c.n, MaxPoolSize)
		}
	}
	if opt.PipelinePoolSize > MaxPoolSize {
		return fmt.Errorf("option pipeline_pool_size %d is over %d (a negative one turns the pipeline pool off)", opt.PipelinePoolSize, MaxPoolSize)
	}
	for _, b := range []struct {
		name string
		n    int
	}{{"pipeline_read_buffer_size", opt.PipelineReadBufferSize}, {"pipeline_write_buffer_size", opt.PipelineWriteBufferSize}} {
		if b.n < 0 || b.n > maxURLBufferSize {
			return fmt.Errorf("option %s %d is not a number of bytes from 0 to %d", b.name, b.n, maxURLBufferSize)
		}
	}
	for _, d := range urlDurations {
		if err := checkURLDuration(d.name, q.Get(d.name), d.off); err != nil {
			return err
		}
	}
	return nil
}

// checkURLDuration checks a duration option's raw value as go-redis reads
// it (a bare number is seconds), which redis.ParseURL has parsed already.
// "" is the option left out.
func checkURLDuration(name, raw string, off bool) error {
	if raw == "" || off && raw == "-1" {
		return nil
	}
	var d time.Duration
	if n, err := strconv.ParseInt(raw, 10, 64); err == nil {
		// go-redis multiplies without a check: past this it wraps around.
		if n > math.MaxInt64/int64(time.Second) {
			return fmt.Errorf("option %s=%s is too long: a bare number is seconds", name, raw)
		}
		d = time.Duration(n) * time.Second
	} else if d, err = time.ParseDuration(raw); err != nil {
		return fmt.Errorf("option %s=%s: %w", name, raw, err)
	}
	if d < time.Millisecond {
		also := ""
		if off {
			also = ", -1 to turn it off"
		}
		return fmt.Errorf("option %s=%s is under 1ms: give a duration such as 500ms (a bare number is seconds)%s, or leave it out for go-redis's default", name, raw, also)
	}
	return nil
}
