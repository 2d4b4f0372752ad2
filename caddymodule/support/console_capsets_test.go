package support

import (
	"sync/atomic"
	"testing"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"
)

// TestUnknownCapSetsWarned proves that a console whose cap_sets names a
// cap set the config does not have (a typo: pussh) says so in the log,
// once, when it lists its cap sets: a probe's console loaded, listed
// nothing and called the real cap set unknown, with no word of the typo.
func TestUnknownCapSetsWarned(t *testing.T) {
	core, logs := observer.New(zapcore.DebugLevel)
	// As Provision leaves it.
	c := &Console{CapSets: []string{"pussh"}, shown: map[string]bool{"pussh": true}, logger: zap.New(core), warnedUnknown: new(atomic.Bool)}
	c.list()
	c.list()
	lines := logs.All()
	if len(lines) != 1 || lines[0].Level != zapcore.WarnLevel {
		t.Fatalf("logged %v, want one warning", lines)
	}
	if u, _ := lines[0].ContextMap()["unknown"].([]any); len(u) != 1 || u[0] != "pussh" {
		t.Errorf("fields %v", lines[0].ContextMap())
	}
}
