package limiter_test

import (
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// Rules whose shared log could hold more records than a value can are
// refused when configured.
func TestCheckLogs(t *testing.T) {
	burst := &limiter.Rule{Name: "burst", By: []string{"campaign"}, Limit: 2000, Window: limiter.Window{Duration: 5 * time.Second}}
	day := &limiter.Rule{Name: "day", By: []string{"campaign"}, Limit: 100_000, Window: limiter.Window{Duration: 24 * time.Hour}}
	if err := limiter.CheckLogs([]*limiter.Rule{burst, day}); err == nil {
		t.Fatal("a 5 s window (exact records) beside a limit of 100,000 was accepted")
	}
	if err := limiter.CheckLogs([]*limiter.Rule{day}); err != nil {
		t.Fatalf("a bucketed day log was refused: %v", err)
	}
	if err := limiter.CheckLogs(limitertest.SeedRules()); err != nil {
		t.Fatalf("the seed config was refused: %v", err)
	}
}
