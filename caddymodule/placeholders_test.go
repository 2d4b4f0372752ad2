package caddymodule_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPlaceholdersInRoutes proves the decision placeholders reach the
// user's own routes: header (on an admitted and on a refused send),
// log_append in the access log, and handle_errors when the upstream fails
// after an admission; and that a request nothing was decided for (a
// missing dimension) reads them empty, not as placeholder text.
func TestPlaceholdersInRoutes(t *testing.T) {
	up := startUpstream(t)
	accessLog := filepath.Join(t.TempDir(), "access.log")
	caps := fmt.Sprintf(`
		frequency_cap {
			key_prefix %s
			dimension recipient {json.to}
			rule two {
				by     recipient
				limit  2
				window 1m
			}
		}`, testPrefix())
	g := startGateway(t, fmt.Sprintf(`
	log {
		output file %s
		format json
	}
	log_append cap_rule      {http.frequency_cap.rule}
	log_append cap_remaining {http.frequency_cap.remaining}
	header >X-Cap "rule=[{http.frequency_cap.rule}] retry=[{http.frequency_cap.retry_after}] remaining=[{http.frequency_cap.remaining}]"
	handle /dead {%s
		reverse_proxy 127.0.0.1:%d
	}
	handle {%[2]s
		reverse_proxy %[4]s
	}
	handle_errors {
		respond "failed with rule=[{http.frequency_cap.rule}] remaining=[{http.frequency_cap.remaining}]" 502
	}`, accessLog, caps, freePort(t), up.addr()))

	a := g.send("/", map[string]any{"to": "alice"})
	expectStatus(t, a, http.StatusOK)
	if x := a.header.Get("X-Cap"); x != "rule=[] retry=[0] remaining=[1]" {
		t.Errorf("admitted: X-Cap %q", x)
	}
	a = g.send("/dead", map[string]any{"to": "alice"})
	expectStatus(t, a, http.StatusBadGateway)
	if string(a.body) != "failed with rule=[] remaining=[0]" {
		t.Errorf("handle_errors answered %q", a.body)
	}
	a = g.send("/", map[string]any{"to": "alice"})
	expectStatus(t, a, http.StatusTooManyRequests)
	x := a.header.Get("X-Cap")
	if !strings.HasPrefix(x, "rule=[two] retry=[") || !strings.HasSuffix(x, "] remaining=[0]") || strings.Contains(x, "retry=[0]") {
		t.Errorf("refused: X-Cap %q", x)
	}
	a = g.send("/", map[string]any{})
	expectStatus(t, a, http.StatusBadRequest)
	if x := a.header.Get("X-Cap"); x != "rule=[] retry=[0] remaining=[]" {
		t.Errorf("undecided: X-Cap %q", x)
	}

	want := [][2]string{
		{`"cap_rule":""`, `"cap_remaining":1`},
		{`"cap_rule":""`, `"cap_remaining":0`},
		{`"cap_rule":"two"`, `"cap_remaining":0`},
		{`"cap_rule":""`, `"cap_remaining":null`},
	}
	var lines []string
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(accessLog)
		lines = strings.Split(strings.TrimSpace(string(b)), "\n")
		if len(lines) >= len(want) {
			break
		}
	}
	if len(lines) != len(want) {
		t.Fatalf("access log has %d lines, want %d: %q", len(lines), len(want), lines)
	}
	for i, w := range want {
		for _, field := range w {
			if !strings.Contains(lines[i], field) {
				t.Errorf("access log line %d lacks %s: %s", i, field, lines[i])
			}
		}
	}
}
