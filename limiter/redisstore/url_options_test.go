package redisstore

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// TestURLOptionsChecked proves that the options a URL's query sets are
// checked before go-redis builds a client with them, and that each refusal
// names the option. A probe loaded every one of the refused URLs: a pool of
// -5 panicked in provisioning (and left reloads and shutdown hanging), one
// of 100000000 took ~28 GB and the process with it, a client name with a
// space failed every connection (reported as a server down, so on_error
// allow passed every send uncapped), ?db=3 after /0 counted in database 3,
// and 1ns timeouts loaded. The accepted URLs are the ones go-redis documents
// and configs in use: they still load.
func TestURLOptionsChecked(t *testing.T) {
	for _, tc := range []struct {
		url  string
		want string // "" for accepted
	}{
		{"redis://127.0.0.1:6379/0?pool_size=64", ""},
		{"redis://127.0.0.1:6379/0?pool_size=10000", ""},
		{"redis://127.0.0.1:6379/0?client_name=freqcap-gw.1", ""},
		{"redis://127.0.0.1:6379/0?client_name=", ""},
		{"redis://127.0.0.1:6379/3?db=3", ""},
		{"redis://127.0.0.1:6379?db=3", ""},
		{"unix:///run/redis.sock?db=2", ""},
		{"redis://127.0.0.1:6379/0?protocol=2", ""},
		{"redis://127.0.0.1:6379/0?pool_timeout=1ms&protocol=&pool_size=", ""}, // blank: the default
		{"redis://127.0.0.1:6379/0?conn_max_idle_time=-1&conn_max_lifetime=1h&conn_max_lifetime_jitter=5m", ""},
		{"redis://127.0.0.1:6379/0?min_idle_conns=2&max_idle_conns=10&max_active_conns=100&max_concurrent_dials=4", ""},
		{"redis://127.0.0.1:6379/0?pipeline_pool_size=-1&pipeline_read_buffer_size=131072", ""},

		{"redis://127.0.0.1:6379/0?pool_size=-5", "pool_size -5 is not a number from 1 to 10000"},
		{"redis://127.0.0.1:6379/0?pool_size=0", "pool_size 0 is not a number from 1 to 10000"},
		{"redis://127.0.0.1:6379/0?pool_size=100000000", "pool_size 100000000 is not a number from 1 to 10000"},
		{"redis://127.0.0.1:6379/0?pool_size=2147483648", "pool_size 2147483648 is not a number from 1 to 10000"},
		{"redis://127.0.0.1:6379/0?pool_size=5&pool_size=100000000", "option pool_size is given 2 times"},
		{"redis://127.0.0.1:6379/0?min_idle_conns=100000000", "min_idle_conns 100000000 is not a number from 0 to 10000"},
		{"redis://127.0.0.1:6379/0?max_active_conns=-1", "max_active_conns -1 is not a number from 0 to 10000"},
		{"redis://127.0.0.1:6379/0?pipeline_pool_size=100000000", "pipeline_pool_size 100000000"},
		{"redis://127.0.0.1:6379/0?pipeline_write_buffer_size=1073741824", "pipeline_write_buffer_size 1073741824"},
		{"redis://127.0.0.1:6379/0?client_name=x%20y", `client_name "x y"`},
		{"redis://127.0.0.1:6379/0?client_name=a%0Ab", `client_name "a\nb"`},
		{"redis://127.0.0.1:6379/0?client_name=%C3%A9t%C3%A9", `client_name "été"`},
		{"redis://127.0.0.1:6379/0?protocol=4", "protocol 4"},
		{"redis://127.0.0.1:6379/0?db=3", "database 0 in its path and 3 in its query"},
		{"redis://127.0.0.1:6379/1?db=0", "database 1 in its path and 0 in its query"},
		{"redis://127.0.0.1:6379/-1", "database -1: a database is a number from 0"},
		{"redis://127.0.0.1:6379?db=-2", "database -2: a database is a number from 0"},
		// The store's own options, which the URL's were dropped for
		// without a word (skip_verify: every call failed on a
		// self-signed server).
		{"redis://127.0.0.1:6379/0?read_timeout=2s", "option read_timeout is the store's own: the redis block's timeout bounds every call"},
		{"redis://127.0.0.1:6379/0?write_timeout=-1", "option write_timeout is the store's own"},
		{"redis://127.0.0.1:6379/0?dial_timeout=1", "option dial_timeout is the store's own: write dial_timeout in the redis block"},
		{"redis://127.0.0.1:6379/0?max_retries=3", "option max_retries is the store's own: the store never retries a call"},
		{"redis://127.0.0.1:6379/0?min_retry_backoff=-1", "option min_retry_backoff is the store's own"},
		{"rediss://127.0.0.1:6379/0?skip_verify=true", "option skip_verify is the store's own: write tls_insecure_skip_verify in the redis block"},
		{"redis://127.0.0.1:6379/0?pool_timeout=0s", "pool_timeout=0s is under 1ms"},
		{"redis://127.0.0.1:6379/0?idle_timeout=10ns", "idle_timeout=10ns is under 1ms"},
		{"redis://127.0.0.1:6379/0?max_conn_age=99999999999999", "max_conn_age=99999999999999 is too long"},
	} {
		err := (&Config{URL: tc.url}).Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %v; want %q", tc.url, err, tc.want)
		}
		if cerr := CheckURL(tc.url); (cerr == nil) != (tc.want == "") {
			t.Errorf("%s: CheckURL says %v, Validate %v: the Caddyfile checks what the load does", tc.url, cerr, err)
		}
	}
}

// TestConfigPoolSizeBounds proves that pool_size is held to 1..MaxPoolSize in
// the config (JSON) as in a URL, 0 staying the default, and that a URL and
// pool_size that differ are refused rather than the field winning
// silently. go-redis sizes a pool's structures to PoolSize when the client
// is built: 100000000 took the process's memory, 2147483648 panicked.
func TestConfigPoolSizeBounds(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string // "" for accepted
	}{
		{Config{Addresses: []string{"127.0.0.1:6379"}}, ""},
		{Config{Addresses: []string{"127.0.0.1:6379"}, PoolSize: 1}, ""},
		{Config{Addresses: []string{"127.0.0.1:6379"}, PoolSize: MaxPoolSize}, ""},
		{Config{URL: "redis://127.0.0.1:6379/0?pool_size=64", PoolSize: 64}, ""},
		{Config{URL: "redis://127.0.0.1:6379/0", PoolSize: 64}, ""},
		{Config{Addresses: []string{"127.0.0.1:6379"}, PoolSize: MaxPoolSize + 1}, "pool_size 10001 is not a number from 1 to 10000"},
		{Config{Addresses: []string{"127.0.0.1:6379"}, PoolSize: 100000000}, "pool_size 100000000 is not a number from 1 to 10000"},
		{Config{Addresses: []string{"127.0.0.1:6379"}, PoolSize: 2147483648}, "pool_size 2147483648 is not a number from 1 to 10000"},
		{Config{Addresses: []string{"127.0.0.1:6379"}, PoolSize: -5}, "must not be negative"},
		{Config{URL: "redis://127.0.0.1:6379/0", PoolSize: 100000000}, "pool_size 100000000 is not a number from 1 to 10000"},
		{Config{URL: "redis://127.0.0.1:6379/0?pool_size=8", PoolSize: 64}, "the url and pool_size each give a pool size, and they differ"},
	} {
		err := tc.cfg.Validate()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v; want %q", tc.cfg, err, tc.want)
		}
	}
}

// NewClient refuses a URL's bad pool size with an error instead of letting
// go-redis panic on it (makechan: size out of range), which happened in
// Caddy's provisioning and left later reloads and shutdown hanging.
func TestNewClientRefusesURLPoolSize(t *testing.T) {
	client, err := (&Config{URL: "redis://127.0.0.1:6379/0?pool_size=-5"}).NewClient()
	if err == nil {
		client.Close()
		t.Fatal("NewClient took ?pool_size=-5")
	}
	if !strings.Contains(err.Error(), "pool_size -5") {
		t.Fatalf("error %v does not name pool_size", err)
	}
}

// A URL's client_name and pool_size that pass the checks reach the server
// as written: the connection is named and the store counts.
func TestURLOptionsReachTheServer(t *testing.T) {
	srv := redistest.Start(t)
	cfg := Config{URL: "redis://" + srv.Addr + "/0?client_name=freqcap-gw&pool_size=4", Timeout: time.Second}
	s, client := newConfiguredStore(t, cfg, "urlopt:")
	seedRound(t, s, "alice")
	name, err := client.ClientGetName(context.Background()).Result()
	if err != nil || name != "freqcap-gw" {
		t.Fatalf("client name %q, %v; want freqcap-gw", name, err)
	}
}
