package caddymodule_test

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// The tests that need several gateways run real Caddy processes built from
// ./cmd/caddy, as xcaddy would build them. The binary is built once per test
// binary, with -race when the tests run with it (so the build reuses the
// test build's cache, and the gateways check themselves for races), into
// scratchDir, which TestMain removes. FREQCAP_CADDY_BIN names a binary to
// use instead.
var caddyBuild struct {
	once sync.Once
	path string
	took time.Duration
	err  error
}

// caddyBinary returns the path of a Caddy binary with this module.
func caddyBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("FREQCAP_CADDY_BIN"); p != "" {
		return p
	}
	caddyBuild.once.Do(func() {
		gotool, err := exec.LookPath("go")
		if err != nil {
			caddyBuild.err = fmt.Errorf("the go command is not on PATH: %w", err)
			return
		}
		// Not scratchDir/caddy: that is the in-process Caddy's data
		// directory ($XDG_DATA_HOME/caddy).
		dir := filepath.Join(scratchDir, "bin")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			caddyBuild.err = err
			return
		}
		out := filepath.Join(dir, "caddy")
		args := []string{"build", "-o", out}
		if raceBuild {
			args = append(args, "-race")
		}
		args = append(args, "github.com/freqcap/caddy-freqcap/cmd/caddy")
		start := time.Now()
		cmd := exec.Command(gotool, args...)
		if b, err := cmd.CombinedOutput(); err != nil {
			caddyBuild.err = fmt.Errorf("go %s: %v\n%s", strings.Join(args, " "), err, b)
			return
		}
		caddyBuild.path, caddyBuild.took = out, time.Since(start)
	})
	if caddyBuild.err != nil {
		t.Fatalf("building Caddy: %v", caddyBuild.err)
	}
	return caddyBuild.path
}

// caddyProcess is a Caddy process serving one site on 127.0.0.1, killed
// when the test ends.
type caddyProcess struct {
	url   string // the site
	admin string // the admin endpoint
	dir   string
	cmd   *exec.Cmd
	// exited is closed when the process has exited; err is its Wait error.
	exited chan struct{}
	err    error
}

// processGlobals is the global options block of a Caddy process.
const processGlobals = `{
	admin 127.0.0.1:%d
	persist_config off
	auto_https off
	default_bind 127.0.0.1
	skip_install_trust
	grace_period 1s
}
`

// startCaddyProcess runs Caddy with a config whose only site serves body
// (the inside of the site block) and waits until it serves.
func startCaddyProcess(t *testing.T, bin, body string) *caddyProcess {
	t.Helper()
	port, adminP := freePort(t), freePort(t)
	config := fmt.Sprintf(processGlobals, adminP) + fmt.Sprintf("http://127.0.0.1:%d {\n%s\n}\n", port, body)
	return runCaddyfile(t, bin, config, fmt.Sprintf("http://127.0.0.1:%d", port), fmt.Sprintf("http://127.0.0.1:%d", adminP))
}

// runCaddyfile runs Caddy with a whole Caddyfile, config, whose site is at
// url and whose admin endpoint (which config must set) is at admin, and
// waits until the admin endpoint answers. Caddy's data and config
// directories are the process's own (dir).
func runCaddyfile(t *testing.T, bin, config, url, admin string) *caddyProcess {
	t.Helper()
	dir := t.TempDir()
	p := &caddyProcess{url: url, admin: admin, dir: dir, exited: make(chan struct{})}
	file := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(file, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "caddy.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	p.cmd = exec.Command(bin, "run", "--config", file, "--adapter", "caddyfile")
	p.cmd.Dir = dir
	p.cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("starting Caddy: %v", err)
	}
	go func() {
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		<-p.exited
		if t.Failed() {
			t.Logf("log of Caddy %s:\n%s", p.url, tail(p.log(), 4000))
		}
	})

	c := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-p.exited:
			t.Fatalf("Caddy exited at start (%v):\n%s", p.err, p.log())
		default:
		}
		if res, err := c.Get(p.admin + "/config/"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("Caddy did not start in 30 s:\n%s", p.log())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return p
}

func (p *caddyProcess) log() []byte {
	b, _ := os.ReadFile(filepath.Join(p.dir, "caddy.log"))
	return b
}

// healthy fails the test if the process has exited or logged a panic.
func (p *caddyProcess) healthy(t *testing.T) {
	t.Helper()
	select {
	case <-p.exited:
		t.Errorf("Caddy %s exited during the test: %v", p.url, p.err)
	default:
	}
	if log := p.log(); bytes.Contains(log, []byte("panic")) || bytes.Contains(log, []byte("DATA RACE")) {
		t.Errorf("Caddy %s logged a panic or a data race:\n%s", p.url, tail(log, 4000))
	}
}

// tail returns at most the last n bytes of b.
func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
