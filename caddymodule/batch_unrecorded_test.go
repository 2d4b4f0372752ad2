package caddymodule

import (
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// TestUnrecordedQuota proves what a batch refused under reject reports of
// each rule: what is recorded, the batch's own entries left out. Past the
// limit (exempt sends took it there) nothing remains, whatever the batch
// asked; a calendar rule's wait is still its period's end, a rolling
// rule's nothing where nothing is recorded.
func TestUnrecordedQuota(t *testing.T) {
	rolling := &limiter.Rule{Name: "hour", Limit: 100, Window: limiter.Window{Duration: time.Hour}}
	day := &limiter.Rule{Name: "day", Limit: 5, Window: limiter.Window{Unit: limiter.Day}}
	reqs := []limiter.Request{
		{Checks: []limiter.Check{{Rule: rolling, Cost: 30}, {Rule: day, Cost: 1}}},
		{Checks: []limiter.Check{{Rule: rolling, Cost: 10}, {Rule: day, Cost: 1}}},
	}
	// 120 recorded by an exempt send; the first entry admitted (exempt),
	// the second denied after it.
	ds := []*limiter.Decision{
		{Allowed: true, Denier: -1, Results: []limiter.Result{{Rule: rolling, Limit: 100, Used: 150, Reset: time.Hour}, {Rule: day, Limit: 5, Used: 1, Remaining: 4, Reset: 5 * time.Hour}}},
		{Allowed: false, Denier: 0, Results: []limiter.Result{{Rule: rolling, Limit: 100, Used: 150, Denied: true, Reset: time.Hour}, {Rule: day, Limit: 5, Used: 1, Remaining: 4, Reset: 5 * time.Hour}}},
	}
	asked := [][]int64{{0, 0}, {30, 1}}
	shown := unrecorded(reqs, ds, asked)
	for i, d := range shown {
		if r := d.Results[0]; r.Used != 120 || r.Remaining != 0 {
			t.Errorf("entry %d, rolling past its limit: used %d, remaining %d; want 120 and 0", i, r.Used, r.Remaining)
		}
		if r := d.Results[1]; r.Used != 0 || r.Remaining != 5 || r.Reset != 5*time.Hour {
			t.Errorf("entry %d, calendar day: used %d, remaining %d, reset %s; want 0, 5 and the period's end", i, r.Used, r.Remaining, r.Reset)
		}
	}
	if ds[0].Results[0].Used != 150 {
		t.Error("the store's answers were changed")
	}
}
