package caddymodule_test

import (
	"fmt"
	"math"
	"net/http"
	"reflect"
	"strings"
	"testing"
)

// TestAdminUsage proves, on both stores and through the real admin
// endpoint, that GET answers for exactly the rules whose dimensions the
// query gives, with limit, window, used, remaining and reset_after, and
// records nothing; that DELETE forgets exactly those records (another
// recipient's, and rules needing a dimension not given, keep theirs); and
// that sending works on from the reset counts.
func TestAdminUsage(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startUpstream(t)
		g := startGateway(t, seedSite(redisLine, up.addr(), "name push"))
		send := func(to, content string) *answer {
			return g.send("/v1/send", map[string]any{"to": to, "content": content})
		}
		for _, c := range []string{"c1", "c1", "c2"} {
			expectStatus(t, send("alice", c), http.StatusOK)
		}
		expectStatus(t, send("bob", "c1"), http.StatusOK)

		u := usageOf(t, "push", "recipient=alice")
		expectUsage(t, u, map[string][2]int64{"recipient_minute": {3, 12}, "recipient_day": {3, 47}})
		rm := u["recipient_minute"]
		if rm.Limit != 15 || rm.Window != "1m0s" || !reflect.DeepEqual(rm.By, []string{"recipient"}) || rm.ResetAfter < 1 || rm.ResetAfter > 60 {
			t.Errorf("recipient_minute: %+v", rm)
		}
		if rd := u["recipient_day"]; rd.Window != "24h0m0s" || rd.ResetAfter < 86000 || rd.ResetAfter > 86400 {
			t.Errorf("recipient_day: %+v", rd)
		}
		full := usageOf(t, "push", "recipient=alice&content=c1")
		expectUsage(t, full, map[string][2]int64{
			"recipient_minute": {3, 12}, "recipient_day": {3, 47},
			"same_content_59s": {2, 0}, "same_content_59m": {2, 3},
		})
		// Asking again records nothing, and neither did the GETs before.
		expectUsage(t, usageOf(t, "push", "recipient=alice&content=c1"), map[string][2]int64{
			"recipient_minute": {3, 12}, "recipient_day": {3, 47},
			"same_content_59s": {2, 0}, "same_content_59m": {2, 3},
		})
		if a := send("alice", "c3"); a.header.Get("RateLimit") == "" || !strings.HasPrefix(a.header.Get("RateLimit"), `"recipient_minute";r=11;`) {
			t.Fatalf("after the GETs, a send reports %q, want recipient_minute r=11", a.header.Get("RateLimit"))
		}

		if r := resetUsage(t, "push", "recipient=alice"); r.Name != "push" || !reflect.DeepEqual(r.Reset, []string{"recipient_minute", "recipient_day"}) {
			t.Errorf("DELETE answered %+v", r)
		}
		u = usageOf(t, "push", "recipient=alice&content=c1")
		expectUsage(t, u, map[string][2]int64{
			"recipient_minute": {0, 15}, "recipient_day": {0, 50},
			"same_content_59s": {2, 0}, "same_content_59m": {2, 3},
		})
		if u["recipient_minute"].ResetAfter != 0 {
			t.Errorf("an empty rolling window resets after %d s, want 0", u["recipient_minute"].ResetAfter)
		}
		expectUsage(t, usageOf(t, "push", "recipient=bob"), map[string][2]int64{"recipient_minute": {1, 14}, "recipient_day": {1, 49}})

		// Same content is still refused: its rules needed content too.
		denied := send("alice", "c1")
		expectStatus(t, denied, http.StatusTooManyRequests)
		if rule := denied.problem(t).Rule; rule != "same_content_59s" {
			t.Errorf("denied by %v, want same_content_59s", rule)
		}
		if r := resetUsage(t, "push", "content=c1&recipient=alice"); !reflect.DeepEqual(r.Reset, []string{"recipient_minute", "recipient_day", "same_content_59s", "same_content_59m"}) {
			t.Errorf("DELETE answered %+v", r)
		}
		ok := send("alice", "c1")
		expectStatus(t, ok, http.StatusOK)
		if r := ok.header.Get("RateLimit"); !strings.HasPrefix(r, `"recipient_minute";r=14;`) {
			t.Errorf("after the reset, RateLimit %q", r)
		}
	})
}

// TestAdminResetKeepsEverySend proves that a reset of one recipient
// leaves the rules other recipients share alone and names them as kept:
// a rule without by (one count over every send), and a campaign's budget
// when the reset names the recipient beside the campaign; while a reset
// that names the campaign alone is its budget's, and one that names no
// value the rule without by's.
func TestAdminResetKeepsEverySend(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startUpstream(t)
		g := startGateway(t, fmt.Sprintf(`
	frequency_cap {
		name everyone
		%s
		key_prefix %s
		dimension recipient {json.to}
		rule per_recipient {
			by     recipient
			limit  5
			window 1h
		}
		rule all {
			limit  100
			window 1h
		}
		dimension campaign {json.campaign}
		rule campaign_budget {
			by     campaign
			limit  1000
			window 24h
		}
		rule in_campaign {
			by     campaign recipient
			limit  2
			window 24h
		}
	}
	reverse_proxy %s`, redisLine, testPrefix(), up.addr()))
		for _, to := range []string{"g1", "g2", "g3"} {
			expectStatus(t, g.send("/v1/send", map[string]any{"to": to, "campaign": "spring"}), http.StatusOK)
		}
		// The recipient as the gateway counts her: trimmed.
		expectUsage(t, usageOf(t, "everyone", "recipient=%20g1%E2%80%8B"), map[string][2]int64{"per_recipient": {1, 4}, "all": {3, 97}})
		r := resetUsage(t, "everyone", "recipient=g1")
		if !reflect.DeepEqual(r.Reset, []string{"per_recipient"}) || !reflect.DeepEqual(r.Kept, []string{"all"}) {
			t.Fatalf("a recipient's reset answered %+v, want per_recipient reset and all kept", r)
		}
		expectUsage(t, usageOf(t, "everyone", "recipient=g1"), map[string][2]int64{"per_recipient": {0, 5}, "all": {3, 97}})
		// g2 in the spring campaign: her counts, hers within the
		// campaign included, and not the campaign's budget, which every
		// recipient of the campaign shares.
		r = resetUsage(t, "everyone", "recipient=g2&campaign=spring")
		if !reflect.DeepEqual(r.Reset, []string{"per_recipient", "in_campaign"}) || !reflect.DeepEqual(r.Kept, []string{"all", "campaign_budget"}) {
			t.Fatalf("a recipient's reset in a campaign answered %+v, want per_recipient and in_campaign reset, all and campaign_budget kept", r)
		}
		expectUsage(t, usageOf(t, "everyone", "recipient=g2&campaign=spring"), map[string][2]int64{
			"per_recipient": {0, 5}, "all": {3, 97}, "campaign_budget": {3, 997}, "in_campaign": {0, 2}})
		// The campaign alone: its budget is what is reset.
		if r := resetUsage(t, "everyone", "campaign=spring"); !reflect.DeepEqual(r.Reset, []string{"campaign_budget"}) || !reflect.DeepEqual(r.Kept, []string{"all"}) {
			t.Fatalf("the campaign's reset answered %+v, want campaign_budget reset, all kept", r)
		}
		if r := resetUsage(t, "everyone", ""); !reflect.DeepEqual(r.Reset, []string{"all"}) || r.Kept != nil {
			t.Fatalf("the global reset answered %+v, want all reset", r)
		}
		expectUsage(t, usageOf(t, "everyone", ""), map[string][2]int64{"all": {0, 100}})
	})
}

// TestAdminZone proves that for a calendar rule whose zone is a
// placeholder, the zone parameter says in which zone to count (reset_after
// runs to that zone's midnight) and that without it the fallback zone
// applies, as it does for a send that names no zone.
func TestAdminZone(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap {
		name       local
		key_prefix %s
		dimension recipient {json.to}
		rule local_day {
			by       recipient
			limit    3
			calendar day {json.tz} Pacific/Auckland
		}
	}
	reverse_proxy %s`, testPrefix(), up.addr()))
	expectStatus(t, g.send("/", map[string]any{"to": "bob", "tz": "America/New_York"}), http.StatusOK)

	for _, tc := range []struct{ query, zone string }{
		{"recipient=bob&zone=America/New_York", "America/New_York"},
		{"recipient=bob", "Pacific/Auckland"},
	} {
		u := usageOf(t, "local", tc.query)["local_day"]
		if u.Used != 1 || u.Remaining != 2 || u.Window != "calendar day "+tc.zone {
			t.Errorf("%s: %+v", tc.query, u)
		}
		if want := secondsToMidnight(t, tc.zone); math.Abs(float64(u.ResetAfter)-want) > 2 {
			t.Errorf("%s: reset_after %d, want %v (midnight in %s)", tc.query, u.ResetAfter, want, tc.zone)
		}
	}
}

// TestAdminErrors proves every error answer of the admin API through the
// real admin endpoint: its status and its JSON reason.
func TestAdminErrors(t *testing.T) {
	up := startUpstream(t)
	startGateway(t, fmt.Sprintf(`
	handle /push {
		frequency_cap {
			name push
			key_prefix %s
			dimension recipient {json.to}
			dimension content   {json.content}
			rule recipient_minute {
				by     recipient
				limit  15
				window 1m
			}
			rule same_content {
				by     recipient content
				limit  2
				window 59s
			}
		}
		reverse_proxy %s
	}
	handle /local {
		frequency_cap {
			name local
			key_prefix %[1]s
			dimension recipient {json.to}
			rule local_day {
				by       recipient
				limit    3
				calendar day {json.tz} Asia/Shanghai
			}
		}
		reverse_proxy %[2]s
	}
	handle /down {
		frequency_cap {
			name down
			redis {
				address 127.0.0.1:%d
				timeout 100ms
			}
			dimension recipient {json.to}
			rule r {
				by     recipient
				limit  5
				window 1m
			}
		}
		reverse_proxy %[2]s
	}`, testPrefix(), up.addr(), freePort(t)))

	for _, tc := range []struct {
		method, path string
		status       int
		reason       string
		dimension    string
	}{
		{"GET", "/frequency_cap/nope/usage?recipient=a", 404, "no frequency_cap handler named nope", ""},
		{"DELETE", "/frequency_cap/nope/usage?recipient=a", 404, "no frequency_cap handler named nope", ""},
		{"GET", "/frequency_cap/push", 404, "not found: use /frequency_cap/<name>/usage", ""},
		{"POST", "/frequency_cap/", 404, "not found", ""},
		{"GET", "/frequency_cap/push/usage/more?recipient=a", 404, "not found", ""},
		{"GET", "/frequency_cap/push/used?recipient=a", 404, "not found", ""},
		{"POST", "/frequency_cap/push/usage?recipient=a", 405, "method POST not allowed", ""},
		{"PUT", "/frequency_cap/push/usage?recipient=a", 405, "method PUT not allowed", ""},
		{"GET", "/frequency_cap/push/usage?who=a", 400, `unknown dimension "who" (push has content, recipient)`, "who"},
		{"DELETE", "/frequency_cap/push/usage?recipient=a&who=a", 400, `unknown dimension "who"`, "who"},
		{"GET", "/frequency_cap/push/usage?recipient=", 400, "missing value for dimension recipient", "recipient"},
		{"DELETE", "/frequency_cap/push/usage?recipient", 400, "missing value for dimension recipient", "recipient"},
		{"GET", "/frequency_cap/push/usage?recipient=a&recipient=b", 400, "recipient given 2 times", "recipient"},
		{"GET", "/frequency_cap/push/usage?recipient=%zz", 400, "malformed query", ""},
		{"GET", "/frequency_cap/push/usage", 400, "no rule has all its dimensions given: recipient_minute (recipient), same_content (recipient, content)", ""},
		{"GET", "/frequency_cap/push/usage?content=c1", 400, "no rule has all its dimensions given", ""},
		{"DELETE", "/frequency_cap/push/usage?content=x", 400, "no rule has all its dimensions given", ""},
		{"GET", "/frequency_cap/push/usage?recipient=a&zone=Asia/Tokyo", 400, "zone: none of the rules given has a per-request zone", ""},
		{"GET", "/frequency_cap/local/usage?recipient=a&zone=Not/A_Zone", 400, `zone: unknown zone "Not/A_Zone"`, ""},
		{"GET", "/frequency_cap/local/usage?recipient=a&zone=", 400, "missing value for zone", ""},
		{"GET", "/frequency_cap/local/usage?recipient=a&zone=UTC&zone=UTC", 400, "zone given 2 times", ""},
		{"GET", "/frequency_cap/down/usage?recipient=a", 503, "frequency cap store failed: dial tcp", ""},
		{"DELETE", "/frequency_cap/down/usage?recipient=a", 503, "frequency cap store failed: dial tcp", ""},
	} {
		t.Run(tc.method+" "+tc.path, func(t *testing.T) {
			a := adminDo(t, tc.method, tc.path)
			if f := expectFailure(t, a, tc.status, tc.reason); f.Dimension != tc.dimension {
				t.Errorf("dimension %q, want %q", f.Dimension, tc.dimension)
			}
			if tc.status == 405 && a.header.Get("Allow") != "GET, DELETE" {
				t.Errorf("Allow %q", a.header.Get("Allow"))
			}
		})
	}
}
