package caddymodule_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// The case through a real Caddy: a Redis URL with a wrong password
// under the default on_error allow. Caddy does not start (it used to
// start and let every send through uncapped, logging the refusal as
// "unreachable at start"); its output names the cap set, the address and
// the refusal, and never the password.
func TestWrongPasswordStopsCaddy(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "right-password")
	dir := t.TempDir()
	file := filepath.Join(dir, "Caddyfile")
	config := fmt.Sprintf(processGlobals, freePort(t)) + fmt.Sprintf(`http://127.0.0.1:%d {
	frequency_cap {
		name push
		redis redis://:wrongpass@%s/0
		dimension recipient {json.to}
		rule daily {
			by     recipient
			limit  5
			window 24h
		}
	}
	respond "sent"
}
`, freePort(t), srv.Addr)
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, caddyBinary(t), "run", "--config", file, "--adapter", "caddyfile")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || ctx.Err() != nil {
		t.Fatalf("caddy run: %v; want it to exit with an error at once:\n%s", err, tail(out, 4000))
	}
	for _, want := range []string{"frequency_cap push", "redis at " + srv.Addr, "refused the login", "WRONGPASS"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the output does not say %q:\n%s", want, tail(out, 4000))
		}
	}
	if strings.Contains(string(out), "wrongpass@") {
		t.Errorf("the output shows the password:\n%s", tail(out, 4000))
	}
}
