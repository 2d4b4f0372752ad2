package caddymodule

import (
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"

	"github.com/freqcap/caddy-freqcap/limiter/redisstore"
)

// This file reads frequency_cap's redis block.

// unmarshalRedis reads "redis [<url>] [{ ... }]": where the store is (a
// URL, or addresses with cluster or sentinel_master) and how the client
// reaches it, each checked at its line.
func (h *Handler) unmarshalRedis(d *caddyfile.Dispenser) error {
	h.Redis = new(RedisConfig)
	rc := h.Redis
	if d.NextArg() {
		rc.URL = d.Val()
		if d.NextArg() {
			return d.ArgErr()
		}
		if err := checkRedisURL(d, rc.URL); err != nil {
			return err
		}
	}
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if seen[sub] {
			return d.Errf("redis %s already specified", sub)
		}
		seen[sub] = true
		var err error
		switch sub {
		case "url":
			if rc.URL != "" {
				return d.Err("redis url already specified")
			}
			if rc.URL, err = oneArg(d); err == nil {
				err = checkRedisURL(d, rc.URL)
			}
		case "address":
			rc.Addresses = d.RemainingArgs()
			if len(rc.Addresses) == 0 {
				return d.ArgErr()
			}
			for _, a := range rc.Addresses {
				if isPlaceholder(a) {
					continue
				}
				if err := redisstore.CheckAddress(a); err != nil {
					return d.Errf("redis %v", err)
				}
			}
		case "cluster":
			rc.Cluster, err = true, noArgs(d)
		case "sentinel_master":
			rc.SentinelMaster, err = oneArg(d)
		case "sentinel_username":
			rc.SentinelUsername, err = oneArg(d)
		case "sentinel_password":
			rc.SentinelPassword, err = oneArg(d)
		case "username":
			rc.Username, err = oneArg(d)
		case "password":
			rc.Password, err = oneArg(d)
		case "db":
			rc.DB, err = intArg(d, "redis db", 0)
		case "tls":
			rc.TLS, err = true, noArgs(d)
		case "tls_ca":
			rc.TLSCA, err = oneArg(d)
		case "tls_server_name":
			rc.TLSServerName, err = oneArg(d)
		case "tls_insecure_skip_verify":
			rc.TLSInsecureSkipVerify, err = true, noArgs(d)
		case "timeout":
			rc.Timeout, err = redisTimeoutArg(d, sub)
		case "dial_timeout":
			rc.DialTimeout, err = redisTimeoutArg(d, sub)
		case "pool_size":
			rc.PoolSize, err = poolSizeArg(d)
		case "script_only":
			rc.ScriptOnly, err = true, noArgs(d)
		case "native_write":
			var v string
			v, err = oneOf(d, "on", "off")
			rc.NoNativeWrite = v == "off"
		default:
			return d.Errf("unrecognized redis subdirective %q", sub)
		}
		if err != nil {
			return err
		}
	}
	if rc.URL == "" && len(rc.Addresses) == 0 {
		return d.Err("redis needs a URL or an address")
	}
	if rc.URL != "" && (len(rc.Addresses) > 0 || rc.Cluster || rc.SentinelMaster != "") {
		return d.Err("redis url cannot be combined with address, cluster or sentinel_master")
	}
	if rc.URL != "" && !isPlaceholder(rc.URL) && !isPlaceholder(rc.Username) && !isPlaceholder(rc.Password) {
		// username, password and db fill in what the url leaves out;
		// they and pool_size must not say otherwise than it.
		c := redisstore.Config{URL: rc.URL, Username: rc.Username, Password: rc.Password, DB: rc.DB, PoolSize: rc.PoolSize}
		if _, err := c.URLOptions(); err != nil {
			return d.Errf("%v", err)
		}
	}
	if rc.Cluster && rc.SentinelMaster != "" {
		return d.Err("redis cluster and sentinel_master exclude each other")
	}
	if (rc.TLSCA != "" || rc.TLSServerName != "" || rc.TLSInsecureSkipVerify) && !rc.TLS && !strings.HasPrefix(rc.URL, "rediss://") && !isPlaceholder(rc.URL) {
		// Without TLS they would be ignored: the connection would be
		// plain while the config reads as verified.
		return d.Err("redis tls_ca, tls_server_name and tls_insecure_skip_verify need tls (or a rediss:// url)")
	}
	if rc.Cluster && rc.DB != 0 {
		return d.Err("redis cluster has only db 0")
	}
	if len(rc.Addresses) > 1 && !rc.Cluster && rc.SentinelMaster == "" {
		return d.Err(redisstore.ErrAddressesNeedTopology.Error())
	}
	if (rc.SentinelUsername != "" || rc.SentinelPassword != "") && rc.SentinelMaster == "" {
		return d.Err("redis sentinel_username and sentinel_password need sentinel_master")
	}
	return nil
}

// redisTimeoutArg reads the redis block's timeout or dial_timeout (sub),
// refusing one too short for any call to finish. 0 is refused too: in JSON
// it is the field left out, but written in a Caddyfile it would silently
// be the default, however short it reads.
func redisTimeoutArg(d *caddyfile.Dispenser, sub string) (caddy.Duration, error) {
	t, err := durationArg(d, "redis "+sub)
	switch {
	case err != nil:
	case t == 0:
		err = d.Errf("redis %s 0s is under 1ms, too short for any call to Redis to finish: leave %s out for its default", sub, sub)
	default:
		if err = redisstore.CheckTimeout(sub, time.Duration(t)); err != nil {
			err = d.Errf("%v", err)
		}
	}
	return t, err
}

// poolSizeArg reads the redis block's pool_size, held to what
// redisstore.CheckPoolSize allows.
func poolSizeArg(d *caddyfile.Dispenser) (int, error) {
	s, err := oneArg(d)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return 0, d.Errf("redis pool_size %q is not an integer", s)
	}
	if err := redisstore.CheckPoolSize(n); err != nil {
		return 0, d.Errf("redis %v", err)
	}
	return n, nil
}

// checkRedisURL checks a redis url where the Caddyfile gives it, so the
// error names its line. One with placeholders is checked when it loads,
// once they are replaced.
func checkRedisURL(d *caddyfile.Dispenser, raw string) error {
	if isPlaceholder(raw) {
		return nil
	}
	if err := redisstore.CheckURL(raw); err != nil {
		return d.Errf("redis url %v", err)
	}
	return nil
}
