package caddymodule

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
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
		cs, _ := capset.Lookup("registry_test")
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

// TestRegistryRefusesOneNameTwoSettings proves that within one config (one
// Caddy context) a cap set may be used in several routes under one name,
// but a second cap set of that name with other settings is a provisioning
// error: the admin API, the console and the metrics would answer for one
// about the other's sends.
func TestRegistryRefusesOneNameTwoSettings(t *testing.T) {
	const cfg = `{"name": "registry_dup", "dimensions": {"r": "{json.to}"}, "rules": [{"name": "r", "by": ["r"], "limit": %d, "window": "1m"}]}`
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	provision := func(limit int) error {
		h := new(Handler)
		if err := json.Unmarshal([]byte(fmt.Sprintf(cfg, limit)), h); err != nil {
			t.Fatal(err)
		}
		err := h.Provision(ctx)
		t.Cleanup(func() { h.Cleanup() })
		return err
	}
	if err := provision(3); err != nil {
		t.Fatal(err)
	}
	if err := provision(3); err != nil {
		t.Fatalf("the same cap set in a second route: %v", err)
	}
	err := provision(30)
	if err == nil || !strings.Contains(err.Error(), "another frequency_cap in this config is named registry_dup with other settings") {
		t.Fatalf("a second cap set named registry_dup with another limit: %v", err)
	}
}

// TestRegistryUnnamedCapSetsAreAmbiguous proves that cap sets left
// unnamed (all "default") with other settings in one config load, with
// a warning, and that Lookup then answers ErrSameName rather than answer
// for one of them about the other's sends.
func TestRegistryUnnamedCapSetsAreAmbiguous(t *testing.T) {
	const cfg = `{"dimensions": {"r": "{json.to}"}, "rules": [{"name": "r", "by": ["r"], "limit": %d, "window": "1m"}]}`
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	for _, limit := range []int{3, 30} {
		h := new(Handler)
		if err := json.Unmarshal([]byte(fmt.Sprintf(cfg, limit)), h); err != nil {
			t.Fatal(err)
		}
		if err := h.Provision(ctx); err != nil {
			t.Fatalf("an unnamed cap set beside another: %v", err)
		}
		t.Cleanup(func() { h.Cleanup() })
	}
	if cs, err := capset.Lookup(DefaultName); !errors.Is(err, capset.ErrSameName) {
		t.Fatalf("Lookup(%s) = %v, %v; want ErrSameName", DefaultName, cs, err)
	}
}
