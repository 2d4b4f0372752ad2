package caddymodule_test

import (
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
)

// Two blocks that name one cap set adapt when their settings differ only
// by defaults written out (each of those the load fills in), and fail at
// caddy adapt, naming both lines, when a setting really differs.
func TestSameNameExplicitDefaults(t *testing.T) {
	block := func(port int, extra string) string {
		return ":" + strings.Repeat("8", 3) + string(rune('0'+port)) + " {\n\tfrequency_cap {\n\t\tname push\n" + extra +
			"\t\tdimension recipient {json.to}\n\t\trule minute {\n\t\t\tby recipient\n\t\t\tlimit 15\n\t\t\twindow 1m\n\t\t}\n\t}\n\treverse_proxy 127.0.0.1:9000\n}\n"
	}
	for _, extra := range []string{
		"\t\tstatus_code 429\n",
		"\t\tanswer problem\n",
		"\t\ton_error allow\n\t\ton_missing reject\n\t\tkey_prefix freqcap:\n\t\tmax_body 1MiB\n",
	} {
		if _, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(block(0, "")+block(1, extra)), nil); err != nil {
			t.Errorf("defaults written out (%q): %v", strings.TrimSpace(extra), err)
		}
	}
	_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(block(0, "")+block(1, "\t\ton_error deny\n")), nil)
	if err == nil || !strings.Contains(err.Error(), "has other settings than the one at Caddyfile:2") {
		t.Errorf("another on_error: %v", err)
	}
}
