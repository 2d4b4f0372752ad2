package caddymodule

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// A rule's lease is read from the Caddyfile into the JSON config and into
// the engine's rule.
func TestLeaseIsReadIntoTheRule(t *testing.T) {
	var h Handler
	input := "frequency_cap {\n\tdimension campaign {json.campaign}\n\trule coupons {\n\t\tby campaign\n\t\tlimit 233300\n\t\tcalendar day\n\t\tlease 1000\n\t}\n}"
	if err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(input)); err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(h.Rules[0])
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"lease":1000`) {
		t.Errorf("JSON config %s has no lease", b)
	}
	if err := h.compile(); err != nil {
		t.Fatal(err)
	}
	if got := h.rules[0].rule.Lease; got != 1000 || !h.hasLease() {
		t.Errorf("compiled rule's lease %d", got)
	}
}

// A lease a gateway cannot serve exactly fails at caddy adapt, at the
// lease line (or, for a log shared with another rule, the leased rule's).
func TestLeaseErrorsNameTheLine(t *testing.T) {
	rule := func(lines ...string) string {
		return "frequency_cap {\n\tdimension c {json.c}\n\trule x {\n\t\tby c\n\t\t" + strings.Join(lines, "\n\t\t") + "\n\t}\n}"
	}
	for _, tc := range []struct {
		name, input, want string
		line              int
	}{
		{"zero", rule("limit 5000", "window 1h", "lease 0"), `rule x: lease "0" is not an integer of at least 1`, 7},
		{"small limit", rule("limit 1000", "window 1h", "lease 10"), "rule x: lease needs a limit above 1000, not 1000", 7},
		{"big block", rule("lease 600", "limit 5000", "window 1h"), "rule x: lease 600 is more than a tenth of the limit 5000", 5},
		{"per-request limit", rule("limit {tier} 5000", "calendar day", "lease 100"), "rule x: lease needs a fixed limit, not the per-request limit {tier}", 7},
		{"short window", rule("limit 5000", "window 30s", "lease 100"), "rule x: lease needs a window from 1m to 178 days, not 30s", 7},
		{"quiet", rule("quiet 21:00-08:00", "lease 100"), "rule x: a quiet rule counts nothing to lease", 6},
		{"shared log", "frequency_cap {\n\tdimension c {json.c}\n\trule x {\n\t\tby c\n\t\tlimit 5000\n\t\tcalendar day\n\t\tlease 100\n\t}\n\trule y {\n\t\tby c\n\t\tlimit 500\n\t\twindow 1h\n\t}\n}",
			"rule x: a leased rule needs a log of its own, but rule y counts the same dimensions and cost", 3},
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

// The JSON config is held to the same checks at provisioning.
func TestLeaseJSONIsChecked(t *testing.T) {
	h := Handler{Dimensions: map[string]string{"c": "{json.c}"}, Rules: []RuleConfig{{Name: "x", By: []string{"c"}, Limit: 900, Calendar: "day", Lease: 10}}}
	if err := h.compile(); err == nil || !strings.Contains(err.Error(), "rule x: lease needs a limit above 1000") {
		t.Errorf("compile: %v", err)
	}
}
