package caddymodule

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
)

// TestFallbackPlaceholderWarns proves that a rule's limit or zone
// placeholder that has given no usable value in any request it was read
// for (a typo: {json.tierr}, {json.tzz}) is a warning naming the rule, the
// placeholder and the fallback every request used, at the 100th request
// as a missing dimension is, then once an hour while it lasts; one that
// gave a value once is not, nor one read for no request (its rule applied
// to none). A probe's
// typo in limit {plan_dya} 50 gave free senders 50 where 2 was meant,
// with nothing logged.
func TestFallbackPlaceholderWarns(t *testing.T) {
	h, logs := observed(t, `{"dimensions": {"r": "{json.to}", "c": "{json.campaign}"}, "on_missing": "skip",
		"rules": [
			{"name": "tier_day", "by": ["r"], "limit_placeholder": "{json.tierr}", "limit": 50, "window": "24h"},
			{"name": "local_day", "by": ["r"], "limit": 1000, "calendar": "day", "zone": "{json.tzz}", "fallback_zone": "Asia/Shanghai"},
			{"name": "good_day", "by": ["r"], "limit_placeholder": "{json.tier}", "limit": 50, "calendar": "day", "zone": "{json.tz}", "fallback_zone": "UTC"},
			{"name": "campaign_day", "by": ["c"], "limit_placeholder": "{json.campaign_limit}", "limit": 50, "window": "24h"}]}`, time.Minute)
	h.watch.logger = h.logger
	warnings := func() []string {
		var got []string
		for _, e := range logs.FilterLevelExact(zapcore.WarnLevel).FilterMessageSnippet("placeholder has given no usable value").All() {
			f := e.ContextMap()
			got = append(got, fmt.Sprintf("%s %s %s %v", f["rule"], f["placeholder"], f["fallback"], f["requests"]))
		}
		return got
	}
	for i := 0; i < 100; i++ {
		body := fmt.Sprintf(`{"to":"u%d","tier":"5","tz":"Europe/Paris","tierr":"x"}`, i)
		if i > 0 {
			body = fmt.Sprintf(`{"to":"u%d"}`, i) // good_day's placeholders gave values once
		}
		serve(t, h, body)
	}
	w := warnings()
	// The 100th request is among those counted (a probe saw 99).
	if len(w) != 2 || w[0] != "tier_day {json.tierr} 50 100" || w[1] != "local_day {json.tzz} Asia/Shanghai 100" {
		t.Fatalf("at the 100th request: %q, want tier_day's and local_day's alone, after 100 requests", w)
	}
	// Within the hour: no repeat. After it: once more, for local_day
	// alone once tier_day's placeholder gave a value.
	start := time.Unix(0, h.watch.start.Load())
	h.watch.request(start.Add(61 * time.Second))
	if n := len(warnings()); n != 2 {
		t.Errorf("%d warnings within the hour, want 2", n)
	}
	serve(t, h, `{"to":"v","tierr":"7"}`)
	h.watch.request(start.Add(2 * time.Hour))
	if w := warnings(); len(w) != 3 || w[2] != "local_day {json.tzz} Asia/Shanghai 101" {
		t.Errorf("after the hour: %q, want local_day's again alone", w)
	}
}
