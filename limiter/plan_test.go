package limiter

import (
	"testing"
	"time"
)

// Rules whose shared log could hold more records than a value can are
// refused when configured.
func TestCheckLogs(t *testing.T) {
	burst := &Rule{Name: "burst", By: []string{"campaign"}, Limit: 2000, Window: Window{Duration: 5 * time.Second}}
	day := &Rule{Name: "day", By: []string{"campaign"}, Limit: 100_000, Window: Window{Duration: 24 * time.Hour}}
	if err := CheckLogs([]*Rule{burst, day}); err == nil {
		t.Fatal("a 5 s window (exact records) beside a limit of 100,000 was accepted")
	}
	if err := CheckLogs([]*Rule{day}); err != nil {
		t.Fatalf("a bucketed day log was refused: %v", err)
	}
	if err := CheckLogs(seedRules()); err != nil {
		t.Fatalf("the seed config was refused: %v", err)
	}
}
