package caddymodule

import (
	"fmt"
	"net"
	"net/url"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/freqcap/caddy-freqcap/limiter/redisstore"
)

// Defaults of the handler's configuration.
const (
	DefaultName       = "default"
	DefaultKeyPrefix  = "freqcap:"
	DefaultMaxBody    = 1 << 20 // 1 MiB
	DefaultStatusCode = 429
)

// maxMaxBody is the largest max_body: 1 TiB, far past any message a
// gateway should read whole.
const maxMaxBody = 1 << 40

// The values of Handler.OnError and Handler.OnMissing.
const (
	OnErrorAllow    = "allow"
	OnErrorDeny     = "deny"
	OnErrorLocal    = "local"
	OnMissingReject = "reject"
	OnMissingSkip   = "skip"
)

// The values of Handler.Batch and Handler.Splice, and the default of
// Handler.MaxBatch (see batch_config.go).
const (
	BatchReject     = "reject"
	BatchDrop       = "drop"
	SpliceExpo      = "expo"
	DefaultMaxBatch = 1000
)

// RuleConfig is one cap: at most Limit units per window for each distinct
// tuple of the values of the dimensions By.
type RuleConfig struct {
	// Name identifies the rule in answers, headers, logs and the admin API:
	// a letter or '_', then letters, digits, '_', '.', '-'. Required.
	Name string `json:"name"`

	// By lists the dimensions the rule counts by, in order; each must be
	// declared in the handler's dimensions. The first one (usually the
	// recipient) decides where the rule's records live: rules that start
	// with the same dimension are decided in one store round trip.
	// Required, except for a quiet rule.
	By []string `json:"by,omitempty"`

	// Limit is the most units admitted per window: at least 1. Required,
	// unless LimitPlaceholder is set (then it is the fallback; 0 means
	// none) or the rule is a quiet rule (then it must be 0).
	Limit int64 `json:"limit,omitempty"`

	// LimitPlaceholder gives each request's limit ("{tier_day}", with
	// Caddy's map directive giving it per customer tier). A value that is
	// empty or not a positive integer uses Limit, the fallback; without a
	// fallback such a request is answered 400 naming the rule. A value
	// above 1099511627776 (2^40) counts as 2^40. Keys never hold the
	// limit, so a recipient moving between tiers keeps its history; the
	// rule's records are kept in buckets as for a limit above 1000 (see
	// limiter.BucketThreshold). Default: the limit is Limit.
	LimitPlaceholder string `json:"limit_placeholder,omitempty"`

	// Window makes the rule a sliding window of this length: the count over
	// (now-window, now], millisecond precision. Exactly one of window and
	// calendar is required.
	Window caddy.Duration `json:"window,omitempty"`

	// Calendar makes the rule count since the start of the current "day",
	// "week" (starting Monday) or "month" in its zone. Exactly one of window
	// and calendar is required.
	Calendar string `json:"calendar,omitempty"`

	// Zone is the IANA zone of a calendar or quiet rule ("Asia/Shanghai"),
	// or a placeholder that names each request's zone ("{json.tz}"), so
	// that a day or a night is the recipient's own. Default UTC.
	Zone string `json:"zone,omitempty"`

	// FallbackZone is the IANA zone used when a placeholder Zone is empty
	// or names no known zone; such a request is never refused for it.
	// Only with a placeholder Zone. Default UTC.
	FallbackZone string `json:"fallback_zone,omitempty"`

	// Cost is how many units a request counts: a positive integer (0
	// would count nothing: a config error), or a placeholder that yields
	// a non-negative one ("{json.amount}"); a request whose cost is not a
	// non-negative integer is answered 400. Default 1.
	Cost string `json:"cost,omitempty"`

	// Quiet makes the rule a quiet rule: "HH:MM-HH:MM" (24-hour clock, in
	// Zone), a range of local times in which every request it applies to
	// is denied and nothing is recorded, with Retry-After the seconds
	// until the range ends. Start is inclusive, end exclusive; a range
	// whose end is not after its start crosses midnight; it is of
	// wall-clock times, so DST changes shorten or lengthen it as a wall
	// clock would (a time a spring-forward skips is at the change; an hour
	// a fall-back repeats is quiet at both passes). Outside the range the
	// rule admits, counts nothing and is left out of the quota headers.
	// It is decided by the gateway's clock, not the store's. A quiet rule
	// has no limit, window, calendar or cost; By is optional (with it, the
	// rule applies when those dimensions have values). Default: not a
	// quiet rule.
	Quiet string `json:"quiet,omitempty"`

	// Days are the days of the week on which a quiet range may start: day
	// names (mon ... sun) or ranges of them ("mon-fri"). A range that
	// crosses midnight belongs to the day it starts on. Only with Quiet.
	// Default: every day.
	Days []string `json:"days,omitempty"`

	// Lease lets each gateway take this many units of the rule's budget
	// from Redis at a time (a block) and admit from them without a Redis
	// round trip, giving back what it did not spend at the end of the
	// block's term: a budget every request shares (a campaign's coupons)
	// then costs Redis one decision a block instead of one a request. Only
	// for a fixed limit above 1000 and at least ten times the block, a
	// calendar period in a fixed zone or a window from 1m to 178 days, and a rule that
	// shares its log with no other (the same by and cost). The embedded
	// memory store ignores it. Never admits more than the limit; units
	// leased and not spent count as used until they are given back (see
	// docs/configuration.md). Default 0: every decision asks the store.
	Lease int64 `json:"lease,omitempty"`

	// DryRun makes the rule a shadow: it is decided, recorded and reported
	// like the others, but never denies. A request it alone would deny
	// passes, is logged at info and counted as dry_run_deny for the rule.
	// A request another rule denies records nothing in this one either.
	// Default false.
	DryRun bool `json:"dry_run,omitempty"`
}

// ExemptConfig admits the requests whose placeholder has one of the
// values, past any rule or quiet range that would deny them, while still
// recording them in every rule: a burst of one-time passwords gets
// through and uses up the marketing quota too.
type ExemptConfig struct {
	// Placeholder is the expression to compare ("{json.priority}").
	// Required.
	Placeholder string `json:"placeholder"`

	// Values are the values that exempt a request. Required.
	Values []string `json:"values"`
}

// RedisConfig says how to reach Redis: standalone (a URL or one address),
// Sentinel or Cluster. Every string field may use global placeholders such
// as {env.REDIS_URL}.
type RedisConfig struct {
	redisstore.Config

	// Timeout bounds every store call a request makes: no request waits
	// longer, whatever on_error says happens next. Default 100ms.
	Timeout caddy.Duration `json:"timeout,omitempty"`

	// DialTimeout bounds opening a connection. Default: timeout.
	DialTimeout caddy.Duration `json:"dial_timeout,omitempty"`
}

// resolve returns the engine's config with placeholders replaced and the
// durations carried over. Where a server is named (url, addresses,
// sentinel_master), placeholders that leave it empty or without a host
// (an {env.*} unset) are an error: a url would fall back to
// 127.0.0.1:6379, counting in whatever Redis is there instead of the
// shared one. A login left empty is no login, as a dev Redis may want.
func (c *RedisConfig) resolve(repl *caddy.Replacer) (redisstore.Config, error) {
	out := c.Config
	var err error
	server := func(name, v string, host func(string) string) string {
		r := repl.ReplaceKnown(v, "")
		if err == nil && isPlaceholder(v) && (strings.TrimSpace(r) == "" || host != nil && host(r) == "") {
			// Only the placeholders are named: the value, before or
			// after them, may hold a password.
			err = fmt.Errorf("redis %s names no server once its placeholders (%s) are replaced; is the environment variable set?", name, strings.Join(placeholderNames(v), ", "))
		}
		return r
	}
	out.URL = server("url", out.URL, func(u string) string {
		p, perr := url.Parse(u)
		if perr != nil || p.Scheme == "unix" {
			return "?" // the url check says what is wrong, if anything
		}
		return p.Hostname()
	})
	out.Addresses = make([]string, len(c.Addresses))
	for i, a := range c.Addresses {
		out.Addresses[i] = server("address", a, func(a string) string {
			h, _, serr := net.SplitHostPort(a)
			if serr != nil {
				return "?" // refused for its port later
			}
			return h
		})
	}
	if len(out.Addresses) == 0 {
		out.Addresses = nil
	}
	out.SentinelMaster = server("sentinel_master", out.SentinelMaster, nil)
	out.Username = repl.ReplaceKnown(out.Username, "")
	out.Password = repl.ReplaceKnown(out.Password, "")
	out.SentinelUsername = repl.ReplaceKnown(out.SentinelUsername, "")
	out.SentinelPassword = repl.ReplaceKnown(out.SentinelPassword, "")
	out.TLSCA = repl.ReplaceKnown(out.TLSCA, "")
	out.TLSServerName = repl.ReplaceKnown(out.TLSServerName, "")
	out.Timeout = time.Duration(c.Timeout)
	out.DialTimeout = time.Duration(c.DialTimeout)
	return out, err
}

// placeholderNames lists the placeholders of s, braces included.
func placeholderNames(s string) []string {
	var names []string
	for {
		i := strings.IndexByte(s, '{')
		if i < 0 {
			return names
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			return names
		}
		names = append(names, s[i:i+j+1])
		s = s[i+j+1:]
	}
}
