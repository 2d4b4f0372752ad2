package caddymodule

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// load decodes a handler from JSON and provisions and validates it as Caddy
// would, cleaning it up at the end of the test.
func load(t testing.TB, cfg string) (*Handler, error) {
	t.Helper()
	h := new(Handler)
	dec := json.NewDecoder(strings.NewReader(cfg))
	dec.DisallowUnknownFields()
	if err := dec.Decode(h); err != nil {
		t.Fatalf("decoding %s: %v", cfg, err)
	}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	err := h.Provision(ctx)
	if err == nil {
		err = h.Validate()
	}
	t.Cleanup(func() {
		if err := h.Cleanup(); err != nil {
			t.Errorf("cleanup: %v", err)
		}
	})
	return h, err
}

// TestProvisionErrors proves a JSON config is held to the same checks as a
// Caddyfile, with errors that name the rule or dimension at fault.
func TestProvisionErrors(t *testing.T) {
	const dims = `"dimensions": {"r": "{json.to}"}`
	for _, tc := range []struct {
		name, cfg, want string
	}{
		{"no rules", `{` + dims + `}`, "no rules"},
		{"unknown dimension", `{` + dims + `, "rules": [{"name": "x", "by": ["r", "channel"], "limit": 1, "window": "1m"}]}`, `rule x: unknown dimension "channel"`},
		{"duplicate rule", `{` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}, {"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, "rule x: defined twice"},
		{"rule without name", `{` + dims + `, "rules": [{"by": ["r"], "limit": 1, "window": "1m"}]}`, "rule #1 has no name"},
		{"log too large", `{` + dims + `, "rules": [{"name": "burst", "by": ["r"], "limit": 2000, "window": "5s"}, {"name": "day", "by": ["r"], "limit": 100000, "window": "24h"}]}`, "rules burst, day (one log: the same dimensions): beside a window under 10s every record is kept, and a limit of 100000 needs up to 200000"},
		{"bad rule name", `{` + dims + `, "rules": [{"name": "a b", "by": ["r"], "limit": 1, "window": "1m"}]}`, `rule "a b": invalid name`},
		// A rule without by is one count over every send: the dimension
		// it leaves unused is the error.
		{"unused dimension", `{` + dims + `, "rules": [{"name": "x", "limit": 1, "window": "1m"}]}`, "dimension r is declared but no rule counts by it, so it caps nothing"},
		{"a request placeholder Caddy does not provide", `{"dimensions": {"r": "{http.request.heder.X-User}"}, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, `dimension r: "{http.request.heder.X-User}": {http.request.heder.X-User} is no placeholder Caddy provides`},
		{"unclosed placeholder", `{"dimensions": {"r": "{json.to"}, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, `dimension r: "{json.to" does not close its placeholder "{json.to"; write {json.to}`},
		{"constant dimension", `{"dimensions": {"r": "all"}, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, `dimension r: "all" reads nothing of the request`},
		{"unclosed alternative", `{"dimension_alternatives": {"r": ["{json.to}", "{json.cc"]}, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, `"{json.cc" does not close its placeholder`},
		{"unclosed cost", `{` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m", "cost": "{json.amount"}]}`, `rule x: cost: "{json.amount" does not close`},
		{"unclosed exempt", `{` + dims + `, "exempt": {"placeholder": "{json.p", "values": ["otp"]}, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, `exempt: "{json.p" does not close`},
		{"missing limit", `{` + dims + `, "rules": [{"name": "x", "by": ["r"], "window": "1m"}]}`, "rule x: limit must be at least 1, not 0"},
		{"window and calendar", `{` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m", "calendar": "day"}]}`, "rule x: window and calendar exclude each other"},
		{"neither window nor calendar", `{` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 1}]}`, "rule x: needs a window or a calendar"},
		{"zone on a window", `{` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m", "zone": "UTC"}]}`, "rule x: a zone needs a calendar window"},
		{"bad unit", `{` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 1, "calendar": "year"}]}`, `rule x: unknown calendar unit "year"`},
		{"unknown zone", `{` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 1, "calendar": "day", "zone": "Mars/Olympus"}]}`, `rule x: unknown zone "Mars/Olympus"`},
		{"local zone", `{` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 1, "calendar": "day", "zone": "Local"}]}`, `rule x: unknown zone "Local"`},
		{"fallback with fixed zone", `{` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 1, "calendar": "day", "zone": "UTC", "fallback_zone": "Asia/Tokyo"}]}`, "rule x: a fallback zone needs a placeholder zone"},
		{"bad cost", `{` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m", "cost": "lots"}]}`, `rule x: cost "lots"`},
		{"cost past MaxCost", `{` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m", "cost": "4294967296"}]}`, `rule x: cost "4294967296" is neither an integer from 1 to 4294967295 nor a placeholder`},
		{"constant cost 0", `{` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m", "cost": "0"}]}`, `rule x: cost 0 counts no send`},
		{"empty exempt value", `{` + dims + `, "exempt": {"placeholder": "{json.p}", "values": ["otp", ""]}, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, `exempt: the value "" matches every request`},
		{"limit past MaxLimit", `{` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 1099511627777, "window": "1m"}]}`, "rule x: limit 1099511627777 is outside 0..1099511627776"},
		{"bad dimension name", `{"dimensions": {"9": "{json.to}"}, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, `dimension "9": invalid name`},
		{"empty dimension", `{"dimensions": {"r": " "}, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, "dimension r: empty expression"},
		{"bad refund_on", `{` + dims + `, "refund_on": ["oops"], "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, `refund_on "oops"`},
		{"bad on_error", `{` + dims + `, "on_error": "maybe", "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, `on_error must be allow, deny or local, not "maybe"`},
		{"bad on_missing", `{` + dims + `, "on_missing": "drop", "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, `on_missing must be reject or skip`},
		{"bad status", `{` + dims + `, "status_code": 302, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, "status_code 302"},
		{"negative max_body", `{` + dims + `, "max_body": -1, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, "max_body must be 1 byte to 1TiB, not -1"},
		{"bad name", `{"name": "my caps", ` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, `name "my caps": invalid name`},
		{"redis url and cluster", `{"redis": {"url": "redis://x:1", "cluster": true}, ` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, "url cannot be combined"},
		{"policy: quiet with limit", `{` + dims + `, "rules": [{"name": "q", "quiet": "21:00-08:00", "limit": 5}]}`, "rule q: quiet excludes limit, window, calendar and cost"},
		{"policy: quiet bad range", `{` + dims + `, "rules": [{"name": "q", "quiet": "9pm-8am"}]}`, `rule q: quiet range "9pm-8am"`},
		{"policy: quiet unknown day", `{` + dims + `, "rules": [{"name": "q", "quiet": "21:00-08:00", "days": ["someday"]}]}`, `rule q: unknown day "someday"`},
		{"policy: days without quiet", `{` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m", "days": ["sat"]}]}`, "rule x: days needs quiet"},
		{"policy: local without redis", `{` + dims + `, "on_error": "local", "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, "on_error local needs a redis store"},
		{"policy: divisor without local", `{` + dims + `, "local_divisor": 3, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, "local_divisor needs on_error local"},
		{"policy: negative divisor", `{"redis": {"url": "redis://127.0.0.1:1"}, ` + dims + `, "on_error": "local", "local_divisor": -1, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, "local_divisor must be at least 1"},
		{"policy: exempt without values", `{` + dims + `, "exempt": {"placeholder": "{json.p}"}, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, "exempt needs a placeholder and at least one value"},
		{"policy: limit placeholder not a placeholder", `{` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit_placeholder": "gold", "window": "1m"}]}`, `rule x: limit_placeholder "gold" is not a placeholder`},
		{"policy: limit placeholder on a short window", `{` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit_placeholder": "{tier}", "window": "5s"}]}`, "rule x: beside a window under 10s every record is kept"},
		// What JSON alone could get past the checks the Caddyfile makes,
		// each loading before and capping nothing, or counting elsewhere.
		{"json: a Caddyfile shorthand", `{"dimensions": {"r": "{header.X-User}"}, "on_missing": "skip", "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`,
			`{header.X-User} is the Caddyfile's shorthand, which only the Caddyfile adapter rewrites, so in a JSON config it reads as empty in every request; write {http.request.header.X-User}`},
		{"json: a shorthand query in a limit", `{` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 5, "limit_placeholder": "{query.tier}", "window": "1m"}]}`, "write {http.request.uri.query.tier}"},
		{"json: a shorthand in a zone", `{` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 5, "calendar": "day", "zone": "{header.X-TZ}", "fallback_zone": "UTC"}]}`, "write {http.request.header.X-TZ}"},
		{"a shorthand inside lower", `{"dimensions": {"r": "{lower.path.2}"}, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, "write {lower.http.request.uri.path.2}"},
		{"json: exempt without braces", `{` + dims + `, "exempt": {"placeholder": "json.priority", "values": ["otp"]}, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, `exempt "json.priority" is not a placeholder such as {json.priority}`},
		{"json: skip on a constant", `{` + dims + `, "skip": {"placeholder": "true", "values": ["true"]}, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, `skip "true" is not a placeholder such as {json.validate_only}`},
		{"skip on a wildcard", `{"dimensions": {"r": "{json.*.to}"}, "skip": {"placeholder": "{json.*.validate_only}", "values": ["true"]}, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, `skip "{json.*.validate_only}" reads a wildcard path`},
		{"json: a negative window", `{` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": -60000000000}]}`, `rule x: window -1m0s is negative`},
		{"json: a window in milliseconds", `{` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": 3600000}]}`, `rule x: window 3.6ms is not a whole number of milliseconds`},
		{"json: a window in seconds", `{` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": 86400}]}`, `in a JSON config, a bare number is nanoseconds`},
		{"lease with a per-request zone", `{` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 10000, "lease": 1000, "calendar": "day", "zone": "{json.tz}", "fallback_zone": "UTC"}]}`, "rule x: lease needs a fixed zone, not the per-request zone {json.tz}"},
		{"by the reserved dimension", `{` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}, {"name": "y", "by": ["_every_send"], "limit": 1, "window": "1m"}]}`, "rule y: by _every_send: the name is reserved"},
		{"fallback limit past MaxLimit", `{` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 99999999999999, "limit_placeholder": "{json.tier}", "window": "1m"}]}`, "rule x: fallback limit 99999999999999 is above 1099511627776"},
		{"max_body past 1TiB", `{` + dims + `, "max_body": 1099511627777, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, "max_body must be 1 byte to 1TiB"},
		{"refund_on a success", `{` + dims + `, "refund_on": ["5xx", "2xx"], "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, `refund_on "2xx" would give back the quota of every send the upstream took`},
		{"refund_on 202", `{` + dims + `, "refund_on": ["202"], "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, `refund_on "202" would give back`},
		{"refund_on informational", `{` + dims + `, "refund_on": ["1xx"], "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, `refund_on "1xx": an informational status is never a response's final one`},
		{"json: a redis timeout in nanoseconds", `{"redis": {"url": "redis://127.0.0.1:1", "timeout": 100}, ` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, "redis timeout 100ns is under 1ms"},
		{"json: a redis dial_timeout in nanoseconds", `{"redis": {"url": "redis://127.0.0.1:1", "dial_timeout": 1}, ` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, "redis dial_timeout 1ns is under 1ms"},
		{"redis url from an unset variable", `{"redis": {"url": "{env.FREQCAP_TEST_NEVER_SET}"}, ` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`,
			`redis url names no server once its placeholders ({env.FREQCAP_TEST_NEVER_SET}) are replaced`},
		{"redis url host from an unset variable", `{"redis": {"url": "redis://{env.FREQCAP_TEST_NEVER_SET}:6379"}, ` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`,
			`redis url names no server once its placeholders ({env.FREQCAP_TEST_NEVER_SET}) are replaced`},
		{"redis address host from an unset variable", `{"redis": {"addresses": ["{env.FREQCAP_TEST_NEVER_SET}:6379"]}, ` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`,
			`redis address names no server`},
		{"redis url and db that differ", `{"redis": {"url": "redis://127.0.0.1:1/3", "db": 5}, ` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, "the url selects database 3 and db 5"},
		{"redis url and password that differ", `{"redis": {"url": "redis://:one@127.0.0.1:1", "password": "two"}, ` + dims + `, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, "the url and password each give a password, and they differ"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// exempt and skip on a constant placeholder are a switch per deployment
// ({env.NO_CAPS} yes: every request exempt where it is set), not a
// mistake: they load.
func TestMatchOnTheEnvironment(t *testing.T) {
	for _, what := range []string{"exempt", "skip"} {
		if _, err := load(t, `{"dimensions": {"r": "{json.to}"}, "`+what+`": {"placeholder": "{env.FREQCAP_TEST_NO_CAPS}", "values": ["yes"]}, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`); err != nil {
			t.Errorf("%s on {env.*}: %v", what, err)
		}
	}
}

// A url whose host an unset {env.*} leaves out is refused without the
// password its other placeholders fill in: the error goes to the log and
// to the admin API's answer.
func TestRedisURLErrorHidesThePassword(t *testing.T) {
	t.Setenv("FREQCAP_TEST_PW", "S3CRET-pw")
	_, err := load(t, `{"redis": {"url": "redis://gw:{env.FREQCAP_TEST_PW}@{env.FREQCAP_TEST_NEVER_SET}:6379"}, "dimensions": {"r": "{json.to}"}, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`)
	if err == nil || strings.Contains(err.Error(), "S3CRET") || !strings.Contains(err.Error(), "names no server") {
		t.Fatalf("error %v: want it refused, without the password", err)
	}
}

// A login that an unset {env.*} leaves empty is no login, as a dev Redis
// without a password wants: one config for every environment loads.
func TestRedisLoginFromAnUnsetVariable(t *testing.T) {
	if _, err := load(t, `{"redis": {"addresses": ["127.0.0.1:1"], "password": "{env.FREQCAP_TEST_NEVER_SET}"}, "dimensions": {"r": "{json.to}"}, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`); err != nil {
		t.Fatal(err)
	}
}

// TestStorePool proves handlers with the same store share it, that the
// last Cleanup closes it, and that Cleanup after a failed Provision or a
// failed Validate neither panics nor leaks a reference.
func TestStorePool(t *testing.T) {
	const cfg = `{"key_prefix": "pool-test:", "dimensions": {"r": "{json.to}"}, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`
	key := "memory|pool-test:"
	t.Run("shared", func(t *testing.T) {
		a, err := load(t, cfg)
		if err != nil {
			t.Fatal(err)
		}
		b, err := load(t, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if a.store != b.store {
			t.Error("two handlers with the same memory store got different stores")
		}
		if refs, _ := stores.References(key); refs != 2 {
			t.Errorf("%d references, want 2", refs)
		}
	})
	if refs, ok := stores.References(key); ok {
		t.Fatalf("after every Cleanup the store still has %d references", refs)
	}

	t.Run("failed provision", func(t *testing.T) {
		h, err := load(t, `{"dimensions": {"r": "{json.to}"}, "rules": [{"name": "x", "by": ["nope"], "limit": 1, "window": "1m"}]}`)
		if err == nil || h.storeKey != "" {
			t.Fatalf("err %v, store key %q", err, h.storeKey)
		}
	})
	t.Run("failed validate", func(t *testing.T) {
		_, err := load(t, `{"on_error": "maybe", "key_prefix": "pool-test:", "dimensions": {"r": "{json.to}"}, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`)
		if err == nil {
			t.Fatal("no error")
		}
	})
	if refs, ok := stores.References(key); ok {
		t.Fatalf("after a failed load the store still has %d references", refs)
	}
}

// TestDefaults proves what an empty setting means after Provision.
func TestDefaults(t *testing.T) {
	h, err := load(t, `{"dimensions": {"r": "{json.to}"}, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	if h.Name != "default" || h.KeyPrefix != "freqcap:" || h.OnError != "allow" || h.OnMissing != "reject" ||
		h.MaxBody != 1<<20 || h.StatusCode != 429 || h.timeout != 100_000_000 || h.DryRun || len(h.refundOn) != 0 {
		t.Errorf("defaults: %+v", h)
	}
	if h.rules[0].rule.Weight != "" || h.rules[0].cost != 1 || h.needs != needJSON {
		t.Errorf("compiled rule: %+v, needs %d", h.rules[0], h.needs)
	}
}

// TestWeights proves rules with different costs never share a record log:
// the cost expression is the rule's weight, and the default cost 1 is none.
func TestWeights(t *testing.T) {
	h, err := load(t, `{"dimensions": {"r": "{json.to}"}, "rules": [
		{"name": "a", "by": ["r"], "limit": 1, "window": "1m", "cost": "1"},
		{"name": "b", "by": ["r"], "limit": 3, "window": "1m", "cost": "3"},
		{"name": "c", "by": ["r"], "limit": 1, "calendar": "month", "cost": "{json.amount}", "zone": "{form.tz}", "fallback_zone": "Asia/Tokyo"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []struct {
		weight string
		cost   int64
		expr   string
	}{{"", 1, ""}, {"3", 3, ""}, {"{json.amount}", 1, "{json.amount}"}} {
		r := h.rules[i]
		if r.rule.Weight != want.weight || r.cost != want.cost || r.costExpr != want.expr {
			t.Errorf("rule %s: weight %q cost %d expr %q", r.rule.Name, r.rule.Weight, r.cost, r.costExpr)
		}
	}
	if z := h.rules[2].rule.Window.Zone; z == nil || z.String() != "Asia/Tokyo" || h.rules[2].zoneExpr != "{form.tz}" {
		t.Errorf("zone %v expr %q", z, h.rules[2].zoneExpr)
	}
	if h.needs != needJSON|needForm {
		t.Errorf("needs %b", h.needs)
	}
}
