package caddymodule_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestStackedQuotaPassedOn proves that a request two cap sets pass on
// lists both sets' rules in its quota fields whenever the first passes
// it on, not only when it admits it whole: a batch whose first set
// dropped an entry (its fields said only the second set's r=2, where the
// first's rule had nothing left), and a first set under dry_run that
// would have refused (its fields were the second set's alone, where the
// docs promise what a live run would say).
func TestStackedQuotaPassedOn(t *testing.T) {
	up := startUpstream(t)
	set := func(path, name, extra, dim string, limit int) string {
		return fmt.Sprintf(`
	frequency_cap %s {
		name %s
		key_prefix %s
		%s
		dimension recipient %s
		rule %s_r {
			by recipient
			limit %d
			window 1h
		}
	}`, path, name, testPrefix(), extra, dim, name, limit)
	}
	g := startGateway(t, set("/bb", "stack_a", "batch drop", "{json.*.to}", 2)+set("/bb", "stack_b", "batch drop", "{json.*.to}", 3)+
		set("/dry", "stack_dry", "dry_run", "{json.to}", 1)+set("/dry", "stack_live", "", "{json.to}", 5)+
		"\n\treverse_proxy "+up.addr())

	for range 2 {
		expectStatus(t, g.post("/bb", "application/json", `[{"to":"x"}]`), http.StatusOK)
	}
	a := g.post("/bb", "application/json", `[{"to":"x"},{"to":"y"}]`)
	expectStatus(t, a, http.StatusOK)
	if got := string(up.last().body); got != `[{"to":"y"}]` {
		t.Fatalf("upstream got %s, want x dropped by the first set", got)
	}
	if rl := a.header.Get("RateLimit"); !strings.HasPrefix(rl, `"stack_a_r";r=0;`) || !strings.Contains(rl, `"stack_b_r";r=2;`) {
		t.Errorf("RateLimit of a batch the first set dropped from: %q, want both sets' rules", rl)
	}

	expectStatus(t, g.post("/dry", "application/json", `{"to":"z"}`), http.StatusOK)
	a = g.post("/dry", "application/json", `{"to":"z"}`)
	expectStatus(t, a, http.StatusOK)
	if rl := a.header.Get("RateLimit"); !strings.HasPrefix(rl, `"stack_dry_r";r=0;`) || !strings.Contains(rl, `"stack_live_r";r=3;`) {
		t.Errorf("RateLimit under a dry run that would refuse: %q, want its rule (as if live) beside the live set's", rl)
	}
	if got := a.header.Get("X-RateLimit-Remaining"); got != "0" {
		t.Errorf("X-RateLimit-Remaining %q, want the dry run's 0", got)
	}
}
