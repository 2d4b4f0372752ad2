package caddymodule

import (
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
)

// {lower.<placeholder>} reads another placeholder in lower case (wrapped
// twice, the same); a console or admin lookup of a dimension that is one
// such placeholder is lower-cased as the gateway counts it; and the
// mistakes that would read nothing, or a body field the replacer does not
// see, are config errors.
func TestLowerPlaceholder(t *testing.T) {
	repl := caddy.NewReplacer()
	repl.Set("token", "ABCdef0A1")
	repl.Map(lowerProvider(repl))
	if got := repl.ReplaceAll("{lower.token}/{lower.lower.token}/{lower.absent}", "-"); got != "abcdef0a1/abcdef0a1/-" {
		t.Errorf("replaced: %q", got)
	}

	lookup := lookupForm("{lower.http.request.uri.path.2}")
	if lookup == nil {
		t.Fatal("no lookup for a dimension that is one {lower.*}")
	}
	if v, err := lookup("ABCDEF0A1"); v != "abcdef0a1" || err != nil {
		t.Errorf("lookup: %q, %v", v, err)
	}
	if lookupForm("device:{lower.http.request.uri.path.2}") != nil {
		t.Error("a lookup for a dimension with text around its {lower.*}: the text keeps its case")
	}

	for _, ok := range []string{"{lower.http.request.uri.path.2}", "{lower.http.request.header.X-Token}", "{lower.my_map_output}"} {
		if err := checkBraces(ok); err != nil {
			t.Errorf("%s: %v", ok, err)
		}
	}
	for bad, want := range map[string]string{
		"{lower.json.to}":              "reads a body field",
		"{lower.email.to}":             "reads a body field",
		"{lower.form}":                 "reads a body field",
		"{lower.}":                     "names no placeholder",
		"{lower.http.request.heder.X}": "no placeholder Caddy provides",
	} {
		if err := checkBraces(bad); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: %v, want an error saying %q", bad, err, want)
		}
	}
}
