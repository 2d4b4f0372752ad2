package freqcap_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
)

// caddyBin is ./cmd/caddy built once for the tests of this package.
var caddyBin struct {
	once sync.Once
	path string
	err  error
	out  []byte
}

func buildCaddy(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds a Caddy binary")
	}
	caddyBin.once.Do(func() {
		dir, err := os.MkdirTemp("", "freqcap-caddy-")
		if err != nil {
			caddyBin.err = err
			return
		}
		caddyBin.path = filepath.Join(dir, "caddy")
		build := exec.Command("go", "build", "-o", caddyBin.path, "./cmd/caddy")
		build.Env = append(os.Environ(), "CGO_ENABLED=0")
		caddyBin.out, caddyBin.err = build.CombinedOutput()
	})
	if caddyBin.err != nil {
		t.Fatalf("go build ./cmd/caddy: %v\n%s", caddyBin.err, caddyBin.out)
	}
	return caddyBin.path
}

func TestMain(m *testing.M) {
	code := m.Run()
	if caddyBin.path != "" {
		os.RemoveAll(filepath.Dir(caddyBin.path))
	}
	os.Exit(code)
}

// A Caddyfile block in the docs.
type docBlock struct {
	where string // file:line
	text  string
}

var caddyfileFence = regexp.MustCompile("(?s)```caddyfile\n(.*?)```")

// docBlocks is every ```caddyfile block of README.md and docs/, and
// examples/ (its README and every Caddyfile, whole).
func docBlocks(t *testing.T) []docBlock {
	t.Helper()
	var blocks []docBlock
	mds, _ := filepath.Glob("docs/*.md")
	mds = append(mds, "README.md", "examples/README.md", "conformance/README.md")
	for _, f := range mds {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range caddyfileFence.FindAllSubmatchIndex(data, -1) {
			line := 1 + bytes.Count(data[:m[0]], []byte("\n"))
			blocks = append(blocks, docBlock{fmt.Sprintf("%s:%d", f, line), string(data[m[2]:m[3]])})
		}
	}
	files, _ := filepath.Glob("examples/*/Caddyfile")
	files = append(files, "Caddyfile")
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		blocks = append(blocks, docBlock{f, string(data)})
	}
	return blocks
}

// A block is a whole config when it starts (after comments) with the
// global options or a site address; otherwise it is one or more
// directives of a site, and is adapted inside one.
func wholeConfig(text string) bool {
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		return line == "{" || strings.HasPrefix(line, ":") || strings.HasPrefix(line, "http://") || strings.HasPrefix(line, "https://")
	}
	return false
}

// TestDocsCaddyfilesWorkAsWritten: every Caddyfile block of the README,
// docs/ and examples/ is as `caddy fmt` writes it (so a pasted copy does
// not warn) and adapts; a directive block adapts inside a site; each
// whole config also passes `caddy validate`, which provisions every
// module (a Redis it names need not run: that is a warning).
func TestDocsCaddyfilesWorkAsWritten(t *testing.T) {
	bin := buildCaddy(t)
	dir := t.TempDir()
	env := append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir, "REDIS_PASSWORD=x")
	run := func(args ...string) ([]byte, error) {
		cmd := exec.Command(bin, args...)
		cmd.Env = env
		return cmd.CombinedOutput()
	}
	blocks := docBlocks(t)
	if len(blocks) < 20 {
		t.Fatalf("found %d Caddyfile blocks: the fences are not ```caddyfile any more?", len(blocks))
	}
	for i, b := range blocks {
		file := filepath.Join(dir, fmt.Sprintf("block%d.caddyfile", i))
		if err := os.WriteFile(file, []byte(b.text), 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(bin, "fmt", file)
		cmd.Env = env
		formatted, err := cmd.Output()
		if err != nil || string(formatted) != b.text {
			diff, _ := run("fmt", "--diff", file)
			t.Errorf("%s is not as caddy fmt writes it (%v):\n%s", b.where, err, diff)
			continue
		}
		whole := wholeConfig(b.text)
		if !whole {
			site := ":8080 {\n" + b.text + "}\n"
			if err := os.WriteFile(file, []byte(site), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		if out, err := run("adapt", "--config", file, "--adapter", "caddyfile"); err != nil {
			t.Errorf("%s: caddy adapt: %v\n%s", b.where, err, out)
			continue
		}
		if whole {
			if out, err := run("validate", "--config", file, "--adapter", "caddyfile"); err != nil {
				t.Errorf("%s: caddy validate: %v\n%s", b.where, err, lastLines(string(out), 8))
			}
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
