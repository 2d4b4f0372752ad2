package caddymodule_test

import (
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestAdminAsksForEveryValue proves that the admin API asks for every
// value its answers depend on beyond the dimensions, as a parameter named
// after the placeholder, and says what it assumed when one is not given:
// a device counted in its X-TZ zone is counted in the fallback zone (and
// says so) until the zone is given, then frees up at Tokyo's midnight; a
// limit from a map-ed tier is the fallback (and says so) until the tier's
// limit is given; a cost placeholder, given, answers whether a send of
// that cost fits. records takes the same parameters. A value of the wrong
// kind is a 400 naming the parameter, and an unknown parameter a 400
// listing those there are.
func TestAdminAsksForEveryValue(t *testing.T) {
	up := startUpstream(t)
	const name = "devices_inputs"
	g := startGateway(t, deviceSite(name, "", up.addr()))
	const her = "dev-tokyo"
	expectStatus(t, g.send("/send", map[string]any{"title": "A", "campaign": "spring", "units": 2},
		"X-Device: "+her, "X-TZ: Asia/Tokyo", "X-Tier: gold"), http.StatusOK)

	notes := func(u ruleUsage) string {
		var out []string
		for _, a := range u.Assumed {
			out = append(out, a.Kind+" "+a.Param+"="+a.Value+": "+a.Note)
		}
		return strings.Join(out, "; ")
	}
	u := usageOf(t, name, "device="+her)
	day := u["device_day"]
	want := "zone http.request.header.X-TZ=UTC: counted in UTC, the fallback zone: header X-TZ not given; limit tier_day=3: limit 3, the fallback: tier_day not given"
	if day.Limit != 3 || day.Window != "calendar day UTC" || notes(day) != want {
		t.Errorf("device_day without the zone and tier: limit %d, %q, assumed %q\nwant 3, calendar day UTC, %q", day.Limit, day.Window, notes(day), want)
	}
	if got := notes(u["night"]); got != "zone http.request.header.X-TZ=UTC: counted in UTC, the fallback zone: header X-TZ not given" {
		t.Errorf("the quiet rule without the zone: %q", got)
	}

	u = usageOf(t, name, "device="+her+"&http.request.header.X-TZ=Asia/Tokyo&tier_day=10")
	day = u["device_day"]
	now := time.Now().In(tokyo())
	midnight := time.Date(now.Year(), now.Month(), now.Day()+1, 0, 0, 0, 0, tokyo())
	if secs := int64(time.Until(midnight).Seconds()); day.ResetAfter < secs-5 || day.ResetAfter > secs+5 {
		t.Errorf("device_day in Tokyo frees up in %d s, want about %d (Tokyo's midnight)", day.ResetAfter, secs)
	}
	if day.Limit != 10 || day.Used != 1 || day.Window != "calendar day Asia/Tokyo" || len(day.Assumed) != 0 || len(u["night"].Assumed) != 0 {
		t.Errorf("device_day given the zone and tier: %+v; night %+v", day, u["night"])
	}

	budget := usageOf(t, name, "campaign=spring")["campaign_budget"]
	if got := notes(budget); got != "cost json.units=: whether a send fits depends on its cost, JSON units: not given" || budget.Admits != nil {
		t.Errorf("the budget without a cost: %q, admits %v", got, budget.Admits)
	}
	// A send costing more than the limit has no wait that admits it, as
	// the gateway's answer to it says.
	for _, c := range []struct {
		units        string
		admits, wait bool
	}{{"98", true, true}, {"99", false, true}, {"101", false, false}} {
		b := usageOf(t, name, "campaign=spring&json.units="+c.units)["campaign_budget"]
		if b.Used != 2 || b.Cost == nil || b.Admits == nil || *b.Admits != c.admits || len(b.Assumed) != 0 || c.wait != (b.RetryAfter != nil) || (c.wait && !c.admits && *b.RetryAfter < 1) {
			t.Errorf("the budget for a send of %s: used %d, cost %v, admits %v, retry_after %v; want admits %v, a wait %v", c.units, b.Used, b.Cost, b.Admits, b.RetryAfter, c.admits, c.wait)
		}
	}

	h := held(t, name, "device="+her)
	for _, r := range h.Rules {
		if r.Rule == "device_day" && (r.Limit != 3 || len(r.Assumed) != 2) {
			t.Errorf("records without the zone and tier: %+v", r)
		}
	}
	h = held(t, name, "device="+her+"&http.request.header.X-TZ=Asia/Tokyo&tier_day=10")
	for _, r := range h.Rules {
		if r.Rule == "device_day" && (r.Limit != 10 || r.Window != "calendar day Asia/Tokyo" || len(r.Assumed) != 0) {
			t.Errorf("records given the zone and tier: %+v", r)
		}
	}

	for _, c := range []struct{ query, reason string }{
		{"device=a&tier_day=gold", `tier_day: the limit {tier_day} gives is "gold", not a positive integer`},
		{"device=a&http.request.header.X-TZ=Mars/Olympus", `http.request.header.X-TZ: unknown zone "Mars/Olympus"`},
		{"campaign=a&json.units=-1", `json.units: the cost {json.units} gives is "-1"`},
		{"device=a&tier_day=1&tier_day=2", "tier_day given 2 times"},
		{"device=a&tz=Asia/Tokyo", `unknown dimension "tz" (devices_inputs has campaign, device, title; it also takes http.request.header.X-TZ, tier_day, json.units)`},
	} {
		for _, what := range []string{"usage", "records"} {
			a := adminDo(t, http.MethodGet, "/frequency_cap/"+name+"/"+what+"?"+c.query)
			expectStatus(t, a, http.StatusBadRequest)
			if reason := a.failure(t).Error; !strings.Contains(reason, c.reason) {
				t.Errorf("%s?%s: %q, want %q", what, c.query, reason, c.reason)
			}
		}
	}
}
