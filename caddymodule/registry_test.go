package caddymodule

import (
	"fmt"
	"testing"

	"github.com/freqcap/caddy-freqcap/caddymodule/internal/capset"
)

// TestRegistryByInstance proves the admin API's registry tracks handler
// instances, not names: of two handlers with one name (a reload, where
// the new one provisions before the old one is cleaned up), the newer
// answers; cleaning up the older leaves the newer in place, and only the
// last Cleanup removes the name.
func TestRegistryByInstance(t *testing.T) {
	const cfg = `{"name": "registry_test", "dimensions": {"r": "{json.to}"}, "rules": [{"name": "%s", "by": ["r"], "limit": 1, "window": "1m"}]}`
	old, err := load(t, fmt.Sprintf(cfg, "old"))
	if err != nil {
		t.Fatal(err)
	}
	ruleOf := func() string {
		cs := capset.Lookup("registry_test")
		if cs == nil {
			return ""
		}
		return cs.Rules[0].Rule.Name
	}
	if ruleOf() != "old" {
		t.Fatalf("after the first Provision: %q", ruleOf())
	}
	cur, err := load(t, fmt.Sprintf(cfg, "new"))
	if err != nil {
		t.Fatal(err)
	}
	if ruleOf() != "new" {
		t.Errorf("after the second Provision: %q, want the newer", ruleOf())
	}
	if err := old.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if ruleOf() != "new" {
		t.Errorf("after the older Cleanup: %q, want the newer still", ruleOf())
	}
	if err := cur.Cleanup(); err != nil {
		t.Fatal(err)
	}
	if ruleOf() != "" {
		t.Errorf("after every Cleanup: %q, want none", ruleOf())
	}
}
