package caddymodule

import (
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// redisBlock is a frequency_cap block whose redis lines are lines (each
// starting with a tab), followed by a valid rest: the first redis line is
// line 3.
func redisBlock(lines ...string) string {
	return "frequency_cap {\n\tredis {\n" + strings.Join(lines, "\n") + "\n\t}" + `
	dimension r {json.to}
	rule ok {
		by     r
		limit  1
		window 1m
	}
}`
}

// TestRedisCaddyfileBounds proves that the redis block refuses, at the
// line that says it, what loaded before and then killed, hung or silently
// misconfigured Caddy: a pool size out of 1..10000 (100000000 ran out of
// memory, 2147483648 panicked, a URL's -5 panicked and left reloads
// hanging), a URL option Redis or go-redis would fail on (a client name
// with a space failed every connection), a database given twice or below
// 0, a timeout of 0 (silently the 100ms default) and a URL that fails
// only at load. A URL with a placeholder is left to the load.
func TestRedisCaddyfileBounds(t *testing.T) {
	for _, tc := range []struct {
		name  string
		input string
		want  string // substring of the error; "" for accepted
		line  int
	}{
		{"pool_size at the bound", redisBlock("\t\taddress 127.0.0.1:6379", "\t\tpool_size 10000"), "", 0},
		{"url options in range", redisBlock("\t\turl redis://127.0.0.1:6379/0?pool_size=64&client_name=gw-1&pool_timeout=1s"), "", 0},
		{"url with a placeholder, checked at load", redisBlock("\t\turl redis://127.0.0.1:6379/0?pool_size={env.POOL}"), "", 0},
		{"timeout of 1ms", redisBlock("\t\taddress 127.0.0.1:6379", "\t\ttimeout 1ms", "\t\tdial_timeout 1ms"), "", 0},

		{"pool_size 100000000", redisBlock("\t\taddress 127.0.0.1:6379", "\t\tpool_size 100000000"), "redis pool_size 100000000 is not a number from 1 to 10000", 4},
		{"pool_size 2147483648", redisBlock("\t\taddress 127.0.0.1:6379", "\t\tpool_size 2147483648"), "redis pool_size 2147483648 is not a number from 1 to 10000", 4},
		{"pool_size 10001", redisBlock("\t\taddress 127.0.0.1:6379", "\t\tpool_size 10001"), "redis pool_size 10001 is not a number from 1 to 10000", 4},
		{"pool_size 0", redisBlock("\t\taddress 127.0.0.1:6379", "\t\tpool_size 0"), "redis pool_size 0 is not a number from 1 to 10000", 4},
		{"url pool_size -5", redisBlock("\t\turl redis://127.0.0.1:6379/0?pool_size=-5"), "pool_size -5 is not a number from 1 to 10000", 3},
		{"url pool_size 100000000", "frequency_cap {\n\tredis redis://127.0.0.1:6379/0?pool_size=100000000\n\tdimension r {json.to}\n\trule ok {\n\t\tby r\n\t\tlimit 1\n\t\twindow 1m\n\t}\n}", "pool_size 100000000 is not a number from 1 to 10000", 2},
		{"url and pool_size differ", redisBlock("\t\turl redis://127.0.0.1:6379/0?pool_size=8", "\t\tpool_size 64"), "the url and pool_size each give a pool size, and they differ", 5},
		{"url client_name with a space", "frequency_cap {\n\tredis redis://127.0.0.1:6379/0?client_name=x%20y\n\tdimension r {json.to}\n\trule ok {\n\t\tby r\n\t\tlimit 1\n\t\twindow 1m\n\t}\n}", `client_name "x y"`, 2},
		{"url db in path and query", "frequency_cap {\n\tredis redis://127.0.0.1:6379/0?db=3\n\tdimension r {json.to}\n\trule ok {\n\t\tby r\n\t\tlimit 1\n\t\twindow 1m\n\t}\n}", "database 0 in its path and 3 in its query", 2},
		{"url db -1", "frequency_cap {\n\tredis redis://127.0.0.1:6379/-1\n\tdimension r {json.to}\n\trule ok {\n\t\tby r\n\t\tlimit 1\n\t\twindow 1m\n\t}\n}", "database -1: a database is a number from 0", 2},
		{"url read_timeout", redisBlock("\t\turl redis://127.0.0.1:6379/0?read_timeout=1ns"), "option read_timeout is the store's own", 3},
		{"url pool_timeout 1ns", redisBlock("\t\turl redis://127.0.0.1:6379/0?pool_timeout=1ns"), "pool_timeout=1ns is under 1ms", 3},
		{"timeout 0", redisBlock("\t\taddress 127.0.0.1:6379", "\t\ttimeout 0"), "redis timeout 0s is under 1ms", 4},
		{"timeout 0s", redisBlock("\t\taddress 127.0.0.1:6379", "\t\ttimeout 0s"), "redis timeout 0s is under 1ms", 4},
		{"dial_timeout 0s", redisBlock("\t\taddress 127.0.0.1:6379", "\t\tdial_timeout 0s"), "redis dial_timeout 0s is under 1ms", 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h Handler
			err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
			if tc.want == "" {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("no error; want %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
			if line := ", at Testfile:" + strconv.Itoa(tc.line); !strings.HasSuffix(err.Error(), line) {
				t.Errorf("error %q does not name line %d", err, tc.line)
			}
		})
	}
}

// TestRedisJSONBounds proves a JSON config is held to the same bounds when
// it loads, with errors that name the field or the URL's option: the JSON
// gets past no check the Caddyfile makes. A pool_size of 0 is the field's
// default and loads.
func TestRedisJSONBounds(t *testing.T) {
	const rest = `"dimensions": {"r": "{json.to}"}, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]`
	for _, tc := range []struct {
		name, redis, want string
	}{
		{"pool_size past the bound", `{"addresses": ["127.0.0.1:1"], "pool_size": 10001}`, "pool_size 10001 is not a number from 1 to 10000"},
		{"pool_size 100000000", `{"addresses": ["127.0.0.1:1"], "pool_size": 100000000}`, "pool_size 100000000 is not a number from 1 to 10000"},
		{"pool_size 2147483648", `{"addresses": ["127.0.0.1:1"], "pool_size": 2147483648}`, "pool_size 2147483648 is not a number from 1 to 10000"},
		{"url pool_size -5", `{"url": "redis://127.0.0.1:1/0?pool_size=-5"}`, "pool_size -5 is not a number from 1 to 10000"},
		{"url client_name with a space", `{"url": "redis://127.0.0.1:1/0?client_name=x%20y"}`, `client_name "x y"`},
		{"url db twice", `{"url": "redis://127.0.0.1:1/0?db=3"}`, "database 0 in its path and 3 in its query"},
		{"url pool_size from a placeholder", `{"url": "redis://127.0.0.1:1/0?pool_size={env.FREQCAP_TEST_POOL}"}`, "pool_size -5 is not a number from 1 to 10000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv("FREQCAP_TEST_POOL", "-5")
			_, err := load(t, `{"redis": `+tc.redis+`, `+rest+`}`)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
	if _, err := load(t, `{"redis": {"addresses": ["127.0.0.1:1"], "pool_size": 0}, `+rest+`}`); err != nil {
		t.Errorf("pool_size 0 (the default): %v", err)
	}
}
