package freqcap_test

import (
	"os/exec"
	"strings"
	"testing"
)

// A Caddy built as xcaddy builds it (Caddy's standard modules and this
// module's root package: cmd/caddy) lists every module the project
// registers, the support surfaces included, which live in a package of
// their own.
func TestBuildListsEveryModule(t *testing.T) {
	bin := buildCaddy(t)
	out, err := exec.Command(bin, "list-modules").CombinedOutput()
	if err != nil {
		t.Fatalf("caddy list-modules: %v\n%s", err, out)
	}
	listed := map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		listed[strings.TrimSpace(line)] = true
	}
	for _, id := range []string{"http.handlers.frequency_cap", "http.handlers.frequency_cap_console", "admin.api.frequency_cap", "caddy.listeners.h2_scheme"} {
		if !listed[id] {
			t.Errorf("caddy list-modules does not list %s:\n%s", id, out)
		}
	}
}
