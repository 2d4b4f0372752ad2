package support

import (
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/freqcap/caddy-freqcap/caddymodule/internal/capset"
	"github.com/freqcap/caddy-freqcap/limiter"
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

// TestConflictingNameListed proves that where the running config has
// several unnamed cap sets with other settings (all "default"), the
// listing the console and the admin API share says so under that name,
// with no rules: a probe's listing showed one of them (limit 6) as if the
// other (limit 5) did not exist, while the admin API answered 409.
func TestConflictingNameListed(t *testing.T) {
	load := new(int)
	for i, limit := range []int64{5, 6} {
		cs := &capset.CapSet{Name: "conflict_test", StoreKind: "memory", Rules: []capset.Rule{{Rule: &limiter.Rule{Name: "r", Limit: limit, Window: limiter.Window{Duration: time.Minute}}}}}
		err := capset.Register(cs, load, fmt.Sprint("settings ", i), false)
		if i == 1 && !errors.Is(err, capset.ErrSameName) {
			t.Fatalf("Register = %v, want ErrSameName", err)
		}
		t.Cleanup(func() { capset.Unregister(cs) })
	}
	entries := capSetEntries(func(name string) bool { return name == "conflict_test" })
	if len(entries) != 1 || entries[0].Conflict == "" || len(entries[0].Rules) != 0 {
		t.Fatalf("listed %+v; want one entry saying the name is shared, with no rules", entries)
	}
}
