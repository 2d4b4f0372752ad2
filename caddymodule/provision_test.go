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
		{"negative max_body", `{` + dims + `, "max_body": -1, "rules": [{"name": "x", "by": ["r"], "limit": 1, "window": "1m"}]}`, "max_body must not be negative"},
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
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := load(t, tc.cfg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			}
		})
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
		{"name": "b", "by": ["r"], "limit": 1, "window": "1m", "cost": "3"},
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
