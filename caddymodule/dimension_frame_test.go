package caddymodule_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestDimensionTextAroundNothing proves that a dimension written as text
// around a placeholder ("user:{json.to}") is missing when the placeholder
// reads nothing: a 400 under on_missing reject, its rules left out under
// skip, never every such request counted under the one key "user:". In a
// single send and per entry of a batch.
func TestDimensionTextAroundNothing(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap /one {
		key_prefix %s
		dimension recipient user:{json.to}
		rule r {
			by     recipient
			limit  1
			window 1m
		}
	}
	frequency_cap /batch {
		key_prefix %s
		dimension recipient {json.*.to}
		dimension content   c:{json.*.body}
		on_missing skip content
		rule same {
			by     recipient content
			limit  1
			window 1m
		}
	}
	reverse_proxy %s`, testPrefix(), testPrefix(), up.addr()))
	for _, body := range []string{`{}`, `{"to":""}`, `{"to":" "}`, `{"to":null}`} {
		a := g.post("/one", "application/json", body)
		expectStatus(t, a, http.StatusBadRequest)
		if !strings.Contains(string(a.body), "missing value for dimension recipient") {
			t.Errorf("%s: %s", body, a.body)
		}
	}
	ann := unique("ann")
	expectStatus(t, g.post("/one", "application/json", fmt.Sprintf(`{"to":%q}`, ann)), http.StatusOK)
	expectStatus(t, g.post("/one", "application/json", fmt.Sprintf(`{"to":%q}`, ann)), http.StatusTooManyRequests)

	// Entries without a body skip the content rule: they are no repeat of
	// one another.
	bob := unique("bob")
	for range 2 {
		expectStatus(t, g.post("/batch", "application/json", fmt.Sprintf(`[{"to":%q}]`, bob)), http.StatusOK)
	}
	expectStatus(t, g.post("/batch", "application/json", fmt.Sprintf(`[{"to":%q,"body":"hi"}]`, bob)), http.StatusOK)
	expectStatus(t, g.post("/batch", "application/json", fmt.Sprintf(`[{"to":%q,"body":"hi"}]`, bob)), http.StatusTooManyRequests)
}
