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

// TestKeyingValueWithNUL proves that a value keying the counts with a NUL
// in it is a 400, in JSON, in a form and per batch entry: an upstream in C
// ends the value there, so "ann\x00x1" and "ann\x00x2" would be two
// recipients here and ann to it. A content may hold one.
func TestKeyingValueWithNUL(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap /json {
		key_prefix %[1]s
		dimension recipient {json.to}
		dimension content   {json.body}
		rule r {
			by     recipient content
			limit  1
			window 1m
		}
	}
	frequency_cap /form {
		key_prefix %[1]s
		dimension recipient {form.To}
		rule r {
			by     recipient
			limit  1
			window 1m
		}
	}
	frequency_cap /batch {
		key_prefix %[1]s
		dimension recipient {json.*.to}
		rule r {
			by     recipient
			limit  1
			window 1m
		}
	}
	reverse_proxy %[2]s`, testPrefix(), up.addr()))
	for _, c := range []struct{ path, ctype, body string }{
		{"/json", "application/json", `{"to":"ann\u0000x1","body":"hi"}`},
		{"/form", "application/x-www-form-urlencoded", "To=ann%00x1"},
		{"/batch", "application/json", `[{"to":"bob"},{"to":"ann\u0000x1"}]`},
	} {
		a := g.post(c.path, c.ctype, c.body)
		expectStatus(t, a, http.StatusBadRequest)
		if !strings.Contains(string(a.body), "NUL") {
			t.Errorf("%s %s: %s", c.path, c.body, a.body)
		}
	}
	expectStatus(t, g.post("/json", "application/json", fmt.Sprintf(`{"to":%q,"body":"a\u0000b"}`, unique("cy"))), http.StatusOK)
}
