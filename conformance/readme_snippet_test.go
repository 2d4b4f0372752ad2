package conformance_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/conformance"
)

// TestExamplesReadmeExpoSnippet runs the expo-server-sdk snippet of
// examples/README.md exactly as written, three times, against the
// expo-push example exactly as shipped (its ports aside) in front of the
// example's mock Expo: the first two runs get one ok ticket per recipient
// (three), the third one MessageRateExceeded ticket per recipient, with
// no exception, and the mock saw only the first two runs' six recipients.
func TestExamplesReadmeExpoSnippet(t *testing.T) {
	conformance.RequireNode(t)
	root, err := conformance.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile(filepath.Join(root, "examples", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	section := string(readme)[strings.Index(string(readme), "\n## expo-push"):]
	m := regexp.MustCompile("(?s)```js\n(.*?)```").FindStringSubmatch(section)
	if m == nil {
		t.Fatal("examples/README.md's expo-push section has no js block")
	}
	dir, err := conformance.NodeDir()
	if err != nil {
		t.Fatal(err)
	}
	script := filepath.Join(dir, fmt.Sprintf("readme-snippet-%d.mjs", os.Getpid()))
	if err := os.WriteFile(script, []byte(m[1]), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(script) })

	mock := &conformance.Expo{}
	up := conformance.Serve(t, mock)
	port := conformance.FreePort(t)
	conformance.StartCaddy(t, exampleSites(t, filepath.Join(root, "examples", "expo-push", "Caddyfile"), port, up))

	for run := 1; run <= 3; run++ {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		cmd := exec.CommandContext(ctx, "node", script)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), fmt.Sprintf("EXPO_BASE_URL=http://127.0.0.1:%d", port))
		out, err := cmd.CombinedOutput()
		cancel()
		if err != nil {
			t.Fatalf("run %d: node: %v\n%s", run, err, out)
		}
		var tickets []struct {
			Status  string `json:"status"`
			Details struct {
				Error string `json:"error"`
			} `json:"details"`
		}
		if err := json.Unmarshal(out, &tickets); err != nil {
			t.Fatalf("run %d printed %q: %v", run, out, err)
		}
		if len(tickets) != 3 {
			t.Fatalf("run %d: %d tickets, want 3: %s", run, len(tickets), out)
		}
		for i, tk := range tickets {
			capped := tk.Status == "error" && tk.Details.Error == "MessageRateExceeded"
			if (run < 3 && tk.Status != "ok") || (run == 3 && !capped) {
				t.Errorf("run %d, ticket %d: %s", run, i, out)
			}
		}
	}
	var got int
	for _, c := range mock.Calls() {
		got += len(c.Recipients)
	}
	if got != 6 {
		t.Errorf("the mock Expo got %d recipients, want 6", got)
	}
}

// exampleSites is an example's Caddyfile without its global options (the
// launcher writes its own), serving on port and proxying to upstream
// instead of the example's 127.0.0.1:9000.
func exampleSites(t *testing.T, path string, port int, upstream string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(data)
	open := strings.Index(cfg, "\n{\n")
	end := strings.Index(cfg[open+1:], "\n}\n")
	if open < 0 || end < 0 {
		t.Fatalf("%s has no global options block", path)
	}
	cfg = cfg[open+1+end+3:]
	cfg = strings.Replace(cfg, "\n:8080 {", fmt.Sprintf("\n:%d {", port), 1)
	if strings.HasPrefix(cfg, ":8080 {") {
		cfg = fmt.Sprintf(":%d {", port) + strings.TrimPrefix(cfg, ":8080 {")
	}
	return strings.ReplaceAll(cfg, "reverse_proxy 127.0.0.1:9000", "reverse_proxy "+upstream)
}
