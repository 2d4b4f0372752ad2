package caddymodule

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/zap/zapcore"
)

// TestMissingDimensionWarns proves a dimension never found is loud under
// on_missing skip: a typo in a path (device reads {json.mesage.token})
// is a warning naming the dimension and its placeholders at the 100th
// request, again at most once a minute while it lasts, and listed for
// the console; a dimension with alternatives is missing only when none
// of them is found (the topic sends below find it), a batch's only when
// no entry has it; and once a request has it, the warning ends.
func TestMissingDimensionWarns(t *testing.T) {
	h, logs := observed(t, `{"on_missing": "skip",
		"dimensions": {"device": "{json.mesage.token}", "title": "{json.title}"},
		"dimension_alternatives": {"audience": ["{json.token}", "{json.topic}"]},
		"rules": [
			{"name": "device_minute", "by": ["device"], "limit": 1000, "window": "1m"},
			{"name": "audience_minute", "by": ["audience"], "limit": 1000, "window": "1m"},
			{"name": "title_minute", "by": ["title"], "limit": 1000, "window": "1m"}]}`, time.Minute)
	h.watch.logger = h.logger
	warnings := func() []string {
		var dims []string
		for _, e := range logs.FilterLevelExact(zapcore.WarnLevel).FilterMessageSnippet("dimension missing from every request").All() {
			dims = append(dims, fmt.Sprintf("%s %s", e.ContextMap()["dimension"], e.ContextMap()["placeholders"]))
		}
		return dims
	}
	for i := 0; i < 99; i++ {
		body := fmt.Sprintf(`{"message":{"token":"t%d"},"topic":"news","title":"hi"}`, i)
		if i%2 == 0 {
			body = fmt.Sprintf(`{"token":"t%d","title":"hi"}`, i)
		}
		serve(t, h, body)
	}
	if w := warnings(); len(w) != 0 {
		t.Fatalf("warned before the 100th request: %v", w)
	}
	serve(t, h, `{"token":"t","title":"hi"}`)
	if w := warnings(); len(w) != 1 || w[0] != "device {json.mesage.token}" {
		t.Fatalf("at the 100th request: %v, want device's warning alone", w)
	}
	if m := h.watch.Missing(); len(m) != 1 || m[0] != "device" {
		t.Errorf("Missing() = %v", m)
	}

	// Within the minute: no repeat. After it: once more.
	serve(t, h, `{"token":"t","title":"hi"}`)
	start := time.Unix(0, h.watch.start.Load())
	h.watch.request(start.Add(30 * time.Second))
	if n := len(warnings()); n != 1 {
		t.Errorf("%d warnings within the minute, want 1", n)
	}
	h.watch.request(start.Add(61 * time.Second))
	if n := len(warnings()); n != 2 {
		t.Errorf("%d warnings after the minute, want 2", n)
	}

	// Found once in the next period: the warning ends.
	serve(t, h, `{"mesage":{"token":"d1"},"token":"t","title":"hi"}`)
	h.watch.request(start.Add(125 * time.Second))
	if m := h.watch.Missing(); len(m) != 0 {
		t.Errorf("Missing() = %v after device was found", m)
	}
	if n := len(warnings()); n != 2 {
		t.Errorf("%d warnings, want no new one", n)
	}
}

// TestMissingDimensionUnderRejectIsNotWatched: under on_missing reject a
// missing value is a 400 the sender sees, so no warning is needed.
func TestMissingDimensionUnderRejectIsNotWatched(t *testing.T) {
	h, logs := observed(t, `{"dimensions": {"device": "{json.mesage.token}"},
		"rules": [{"name": "device_minute", "by": ["device"], "limit": 1000, "window": "1m"}]}`, time.Minute)
	h.watch.logger = h.logger
	for i := 0; i < 120; i++ {
		if w := serve(t, h, `{"token":"t"}`); w.Code != 400 {
			t.Fatalf("status %d, want 400", w.Code)
		}
	}
	if n := logs.FilterMessageSnippet("dimension missing").Len(); n != 0 {
		t.Errorf("%d warnings under reject", n)
	}
}
