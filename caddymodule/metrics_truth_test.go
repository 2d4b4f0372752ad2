package caddymodule

import (
	"errors"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// samples is how many calls a store_duration_seconds series has timed.
func samples(t *testing.T, handler, op string) uint64 {
	t.Helper()
	m := &dto.Metric{}
	if err := metrics.storeDuration.WithLabelValues(handler, op).(prometheus.Histogram).Write(m); err != nil {
		t.Fatal(err)
	}
	return m.GetHistogram().GetSampleCount()
}

// count is a counter's value.
func count(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestQuietRefusalIsNoStoreDecision proves that a single send a quiet rule
// refuses counts as outcome quiet for it, and is timed as the usage read it is, not as a store decision, and
// is no decision by the store: a probe saw 3 quiet refusals add 3 to
// decisions_by_store_total and store_duration_seconds{op="decide"}, where a
// quiet batch added nothing, skewing the ratios the alerts divide by.
func TestQuietRefusalIsNoStoreDecision(t *testing.T) {
	// A range from this minute on: the requests below fall in it.
	now := time.Now().UTC().Truncate(time.Minute)
	span := now.Format("15:04") + "-" + now.Add(11*time.Minute).Format("15:04")
	h, _ := observed(t, fmt.Sprintf(`{"name": "quiet_truth", "dimensions": {"r": "{json.to}"}, "rules": [
		{"name": "hour", "by": ["r"], "limit": 5, "window": "1h"},
		{"name": "night", "by": ["r"], "quiet": %q}]}`, span), time.Hour)
	decide0, usage0 := samples(t, "quiet_truth", opDecide), samples(t, "quiet_truth", opUsage)
	byStore0 := count(t, h.metrics.byStore)
	for range 3 {
		if w := serve(t, h, `{"to":"ann"}`); w.Code != http.StatusTooManyRequests {
			t.Fatalf("status %d, want the quiet rule's 429", w.Code)
		}
	}
	if d, u, s := samples(t, "quiet_truth", opDecide)-decide0, samples(t, "quiet_truth", opUsage)-usage0, count(t, h.metrics.byStore)-byStore0; d != 0 || u != 3 || s != 0 {
		t.Errorf("3 quiet refusals timed %d decisions and %d usage reads, and counted %v decisions by the store; want 0, 3, 0", d, u, s)
	}
	// Counted as quiet, not denied: a denial ratio read 100 % every night.
	for rule, m := range h.metrics.rules {
		if rule.Name == "night" && (m.quiet == nil || count(t, m.quiet) != 3 || count(t, m.denied) != 0) {
			t.Errorf("night counted %v quiet, %v denied; want 3 and 0", m.quiet, count(t, m.denied))
		}
	}
}

// TestDenialLogLeavesShadowsOut proves that a denial's line names, beside
// the rule that denied, only live rules that denied too: a shadow rule
// never denies (its would-be denial has a line of its own), and a probe
// saw it in also_denied_by.
func TestDenialLogLeavesShadowsOut(t *testing.T) {
	h, logs := observed(t, `{"dimensions": {"r": "{json.to}"}, "rules": [
		{"name": "minute", "by": ["r"], "limit": 1, "window": "1m"},
		{"name": "also", "by": ["r"], "limit": 1, "window": "1h"},
		{"name": "shadow", "by": ["r"], "limit": 1, "window": "2h", "dry_run": true}]}`, time.Hour)
	serve(t, h, `{"to":"bo"}`)
	if w := serve(t, h, `{"to":"bo"}`); w.Code != http.StatusTooManyRequests {
		t.Fatalf("status %d, want 429", w.Code)
	}
	denied := logs.FilterLevelExact(zapcore.DebugLevel).FilterMessage("denied").All()
	if len(denied) != 1 {
		t.Fatalf("denial lines: %v", logs.All())
	}
	if also, _ := denied[0].ContextMap()["also_denied_by"].([]any); len(also) != 1 || also[0] == "shadow" {
		t.Errorf("also_denied_by %v, want the other live rule alone", denied[0].ContextMap()["also_denied_by"])
	}
}

// TestResetsReadZeroFromTheStart proves that resets_total reads 0 for each
// source before any reset, as every other series of a cap set does (a
// probe found it absent until the first reset).
func TestResetsReadZeroFromTheStart(t *testing.T) {
	observed(t, `{"name": "resets_zero", "dimensions": {"r": "{json.to}"}, "rules": [{"name": "m", "by": ["r"], "limit": 1, "window": "1m"}]}`, time.Hour)
	ch := make(chan prometheus.Metric, 100)
	metrics.resets.Collect(ch)
	close(ch)
	found := map[string]bool{}
	for m := range ch {
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			t.Fatal(err)
		}
		labels := map[string]string{}
		for _, l := range d.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		if labels["handler"] == "resets_zero" && d.GetCounter().GetValue() == 0 {
			found[labels["source"]] = true
		}
	}
	if !found["admin"] || !found["console"] {
		t.Errorf("series at 0 before any reset: %v; want admin and console", found)
	}
}

// TestFailureLineNamesEachOp proves that a line summing an interval's
// store failures names each operation that failed, with its count: a
// probe saw 5 decisions and a usage read fail in one second logged as 6
// failures of usage (the op of the last).
func TestFailureLineNamesEachOp(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	w := &storeWarnings{logger: zap.New(core), handler: "push", onError: OnErrorAllow, interval: time.Hour}
	at := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for range 5 {
		w.addAt(at, opDecide, errors.New("i/o timeout"))
	}
	w.addAt(at, opUsage, errors.New("i/o timeout"))
	w.stop()
	lines := logs.All()
	if len(lines) != 2 {
		t.Fatalf("lines: %v", lines)
	}
	first, rest := lines[0].ContextMap(), lines[1].ContextMap()
	if first["op"] != opDecide || first["failures"] != int64(1) {
		t.Errorf("the first failure's line: %v", first)
	}
	by, _ := rest["failures_by_op"].(map[string]int64)
	if rest["op"] != "decide,usage" || rest["failures"] != int64(5) || by[opDecide] != 4 || by[opUsage] != 1 {
		t.Errorf("the interval's line: %v", rest)
	}
}
