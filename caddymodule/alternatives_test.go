package caddymodule

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// TestUnmarshalAlternatives: several placeholders after a dimension's
// name are its alternatives (dimension_alternatives), one stays a
// dimensions string; on_missing skip <dimension>... is skip_missing.
func TestUnmarshalAlternatives(t *testing.T) {
	var h Handler
	err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(`frequency_cap {
		on_missing skip message
		dimension token {json.notifications.*.tokens.*} {json.notifications.*.to}
		dimension message {json.notifications.*.message}
		rule r {
			by token message
			limit 1
			window 1m
		}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	if got := h.DimensionAlternatives["token"]; !slices.Equal(got, []string{"{json.notifications.*.tokens.*}", "{json.notifications.*.to}"}) {
		t.Errorf("alternatives %q", got)
	}
	if _, ok := h.Dimensions["token"]; ok || h.Dimensions["message"] != "{json.notifications.*.message}" {
		t.Errorf("dimensions %q", h.Dimensions)
	}
	if !slices.Equal(h.SkipMissing, []string{"message"}) || h.OnMissing != "" {
		t.Errorf("on_missing %q, skip_missing %q", h.OnMissing, h.SkipMissing)
	}
}

func TestUnmarshalAlternativesErrors(t *testing.T) {
	const rule = "\n\trule x {\n\t\tby t\n\t\tlimit 1\n\t\twindow 1m\n\t}\n}"
	for _, tc := range []struct {
		name, input, want string
		line              int
	}{
		{"text among alternatives", "frequency_cap {\n\tdimension t {json.a} to:{json.b}" + rule, `alternative "to:{json.b}" is not one {json.<path>}`, 2},
		{"a header among alternatives", "frequency_cap {\n\tdimension t {json.a} {http.request.header.To}" + rule, `alternative "{http.request.header.To}"`, 2},
		{"an alternative twice", "frequency_cap {\n\tdimension t {json.a} {json.a}" + rule, `"a" is given twice`, 2},
		{"a bad path", "frequency_cap {\n\tdimension t {json.a} {json.b..c}" + rule, "empty segment", 2},
		{"fcm_topics inside text", "frequency_cap {\n\tdimension t topic:{fcm_topics.a}" + rule, "must be the whole expression", 2},
		{"a bad filter", "frequency_cap {\n\tdimension t {json.n.*[p=].to}" + rule, `bad value ""`, 2},
		{"declared twice", "frequency_cap {\n\tdimension t {json.a} {json.b}\n\tdimension t {json.c}" + rule, "dimension t already declared", 3},
		{"declared twice, alternatives second", "frequency_cap {\n\tdimension t {json.c}\n\tdimension t {json.a} {json.b}" + rule, "dimension t already declared", 3},
		{"on_missing skip of nothing declared", "frequency_cap {\n\ton_missing skip u\n\tdimension t {json.a}" + rule, `on_missing skip: unknown dimension "u"`, 2},
		{"on_missing reject with names", "frequency_cap {\n\ton_missing reject t\n\tdimension t {json.a}" + rule, "wrong argument count", 2},
		{"on_missing neither", "frequency_cap {\n\ton_missing maybe t\n\tdimension t {json.a}" + rule, "on_missing must be reject or skip", 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h Handler
			err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
			if err == nil {
				t.Fatalf("no error; want %q", tc.want)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q does not contain %q", err, tc.want)
			}
			if line := ", at Testfile:" + strconv.Itoa(tc.line); !strings.HasSuffix(err.Error(), line) {
				t.Errorf("error %q does not name line %d", err, tc.line)
			}
		})
	}
}

// TestProvisionAlternatives holds the JSON form to the Caddyfile's
// checks, and keeps a dimensions string with spaces what it always was:
// text.
func TestProvisionAlternatives(t *testing.T) {
	const rule = `"rules": [{"name": "x", "by": ["t"], "limit": 1, "window": 60000000000}]`
	for _, tc := range []struct{ cfg, want string }{
		{`{"dimensions": {"t": "{json.a}"}, "dimension_alternatives": {"t": ["{json.a}", "{json.b}"]}, ` + rule + `}`, "dimension t: declared in dimensions and dimension_alternatives"},
		{`{"dimension_alternatives": {"t": ["{json.a}"]}, ` + rule + `}`, "dimension t: alternatives need two placeholders or more"},
		{`{"dimension_alternatives": {"t": ["{json.a}", "x {json.b}"]}, ` + rule + `}`, `dimension t: alternative "x {json.b}" is not one`},
		{`{"dimensions": {"t": "{json.a}"}, "skip_missing": ["u"], ` + rule + `}`, `skip_missing: unknown dimension "u"`},
	} {
		if _, err := load(t, tc.cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.cfg, err, tc.want)
		}
	}
	h, err := load(t, `{"dimensions": {"t": "{json.a} {json.b}"}, `+rule+`}`)
	if err != nil {
		t.Fatal(err)
	}
	if h.batch != nil || h.dims[0].Expr != "{json.a} {json.b}" {
		t.Errorf("a string with spaces became %+v", h.dims)
	}
	h, err = load(t, `{"dimension_alternatives": {"t": ["{json.message.token}", "{fcm_topics.message.condition}"]}, `+rule+`}`)
	if err != nil {
		t.Fatal(err)
	}
	if h.batch == nil || h.batch.path.String() != "message.token message.condition" {
		t.Errorf("alternatives without a wildcard are no batch dimension: %+v", h.batch)
	}
}
