package caddymodule

import (
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// Defaults of the handler's configuration.
const (
	DefaultName       = "default"
	DefaultKeyPrefix  = "freqcap:"
	DefaultMaxBody    = 1 << 20 // 1 MiB
	DefaultStatusCode = 429
)

// The values of Handler.OnError and Handler.OnMissing.
const (
	OnErrorAllow    = "allow"
	OnErrorDeny     = "deny"
	OnMissingReject = "reject"
	OnMissingSkip   = "skip"
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
	// Required.
	By []string `json:"by"`

	// Limit is the most units admitted per window. Required, at least 1.
	Limit int64 `json:"limit"`

	// Window makes the rule a sliding window of this length: the count over
	// (now-window, now], millisecond precision. Exactly one of window and
	// calendar is required.
	Window caddy.Duration `json:"window,omitempty"`

	// Calendar makes the rule count since the start of the current "day",
	// "week" (starting Monday) or "month" in its zone. Exactly one of window
	// and calendar is required.
	Calendar string `json:"calendar,omitempty"`

	// Zone is the IANA zone of a calendar rule ("Asia/Shanghai"), or a
	// placeholder that names each request's zone ("{json.tz}"), so that a
	// day is the recipient's own day. Default UTC.
	Zone string `json:"zone,omitempty"`

	// FallbackZone is the IANA zone used when a placeholder Zone is empty
	// or names no known zone; such a request is never refused for it.
	// Only with a placeholder Zone. Default UTC.
	FallbackZone string `json:"fallback_zone,omitempty"`

	// Cost is how many units a request counts: a non-negative integer, or a
	// placeholder that yields one ("{json.amount}"); a request whose cost
	// is not a non-negative integer is answered 400. Default 1.
	Cost string `json:"cost,omitempty"`
}

// RedisConfig says how to reach Redis: standalone (a URL or one address),
// Sentinel or Cluster. Every string field may use global placeholders such
// as {env.REDIS_URL}.
type RedisConfig struct {
	limiter.RedisConfig

	// Timeout bounds every store call a request makes: no request waits
	// longer, whatever on_error says happens next. Default 100ms.
	Timeout caddy.Duration `json:"timeout,omitempty"`

	// DialTimeout bounds opening a connection. Default: timeout.
	DialTimeout caddy.Duration `json:"dial_timeout,omitempty"`
}

// resolve returns the engine's config with placeholders replaced and the
// durations carried over.
func (c *RedisConfig) resolve(repl *caddy.Replacer) limiter.RedisConfig {
	out := c.RedisConfig
	out.URL = repl.ReplaceKnown(out.URL, "")
	out.Addresses = make([]string, len(c.Addresses))
	for i, a := range c.Addresses {
		out.Addresses[i] = repl.ReplaceKnown(a, "")
	}
	if len(out.Addresses) == 0 {
		out.Addresses = nil
	}
	out.SentinelMaster = repl.ReplaceKnown(out.SentinelMaster, "")
	out.Username = repl.ReplaceKnown(out.Username, "")
	out.Password = repl.ReplaceKnown(out.Password, "")
	out.TLSCA = repl.ReplaceKnown(out.TLSCA, "")
	out.TLSServerName = repl.ReplaceKnown(out.TLSServerName, "")
	out.Timeout = time.Duration(c.Timeout)
	out.DialTimeout = time.Duration(c.DialTimeout)
	return out
}
