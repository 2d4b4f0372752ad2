package freqcap_test

import (
	"os/exec"
	"strings"
	"testing"
)

// The packages import only downwards, as docs/architecture.md draws them:
// the engine's core knows no store, neither store knows the other, and
// the handler's package does not reach the support surfaces. The
// compiler refuses a cycle, not an arrow the wrong way: this test does.
func TestPackagesImportOnlyDownwards(t *testing.T) {
	const mod = "github.com/freqcap/caddy-freqcap/"
	never := map[string][]string{
		"limiter":                    {"limiter/memstore", "limiter/redisstore", "caddymodule"},
		"limiter/internal/recordlog": {"limiter"},
		"limiter/memstore":           {"limiter/redisstore", "caddymodule"},
		"limiter/redisstore":         {"limiter/memstore", "caddymodule"},
		"caddymodule":                {"caddymodule/support"},
		"caddymodule/support":        {"caddymodule", "limiter/memstore", "limiter/redisstore"},
		"internal/h2scheme":          {"caddymodule", "limiter"},
		"caddymodule/h2scheme":       {"caddymodule", "limiter"},
	}
	for pkg, banned := range never {
		out, err := exec.Command("go", "list", "-deps", "./"+pkg).CombinedOutput()
		if err != nil {
			t.Fatalf("go list -deps ./%s: %v\n%s", pkg, err, out)
		}
		deps := map[string]bool{}
		for _, d := range strings.Fields(string(out)) {
			deps[strings.TrimPrefix(d, mod)] = true
		}
		for _, b := range banned {
			if deps[b] {
				t.Errorf("%s imports %s", pkg, b)
			}
		}
	}
}
