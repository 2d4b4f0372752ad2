package conformance

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// The Caddy binary is built once per test binary from the repository's
// ./cmd/caddy (Caddy's standard modules plus this module, as xcaddy builds
// it) into a scratch directory that Main removes. FREQCAP_CADDY_BIN names a
// binary to use instead (then nothing is built).
var caddyBuild struct {
	once sync.Once
	path string
	took time.Duration
	err  error
}

// scratch is a directory that lives as long as the test binary.
var scratch struct {
	once sync.Once
	dir  string
	err  error
}

func scratchDir() (string, error) {
	scratch.once.Do(func() {
		scratch.dir, scratch.err = os.MkdirTemp("", "freqcap-conformance-")
	})
	return scratch.dir, scratch.err
}

// Main runs the tests of a package that uses this one and removes what they
// left behind (the Caddy binary built for them). Call it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(conformance.Main(m)) }
func Main(m *testing.M) int {
	code := m.Run()
	if scratch.dir != "" {
		os.RemoveAll(scratch.dir)
	}
	return code
}

// RepoRoot returns the directory of the module github.com/freqcap/caddy-freqcap:
// the first directory, from the working directory upwards, whose go.mod
// declares it (the conformance/gosdk module's go.mod does not).
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	decl := regexp.MustCompile(`(?m)^module\s+github\.com/freqcap/caddy-freqcap\s*$`)
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && decl.Match(b) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("no go.mod declaring module github.com/freqcap/caddy-freqcap above the working directory")
		}
		dir = parent
	}
}

// CaddyBinary returns the path of a Caddy binary with this module, building
// it on first use (go build -o <scratch>/caddy ./cmd/caddy in the
// repository root).
func CaddyBinary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("FREQCAP_CADDY_BIN"); p != "" {
		return p
	}
	caddyBuild.once.Do(func() {
		root, err := RepoRoot()
		if err != nil {
			caddyBuild.err = err
			return
		}
		gotool, err := exec.LookPath("go")
		if err != nil {
			caddyBuild.err = fmt.Errorf("the go command is not on PATH: %w", err)
			return
		}
		dir, err := scratchDir()
		if err != nil {
			caddyBuild.err = err
			return
		}
		out := filepath.Join(dir, "caddy")
		start := time.Now()
		cmd := exec.Command(gotool, "build", "-o", out, "./cmd/caddy")
		cmd.Dir = root
		if b, err := cmd.CombinedOutput(); err != nil {
			caddyBuild.err = fmt.Errorf("go build -o %s ./cmd/caddy (in %s): %v\n%s", out, root, err, b)
			return
		}
		caddyBuild.path, caddyBuild.took = out, time.Since(start)
	})
	if caddyBuild.err != nil {
		t.Fatalf("building Caddy: %v", caddyBuild.err)
	}
	return caddyBuild.path
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Caddy is a Caddy process, killed (by its PID) when the test ends.
type Caddy struct {
	// Admin is the admin endpoint (http://127.0.0.1:<port>).
	Admin string
	// Dir holds the Caddyfile, the log and Caddy's data directory.
	Dir string
	// Config is the Caddyfile it runs.
	Config string

	cmd    *exec.Cmd
	exited chan struct{}
	err    error
}

// PID is the process's id.
func (c *Caddy) PID() int { return c.cmd.Process.Pid }

// Log returns what the process has logged so far.
func (c *Caddy) Log() string {
	b, _ := os.ReadFile(filepath.Join(c.Dir, "caddy.log"))
	return string(b)
}

// Healthy fails the test if the process has exited or logged a panic.
func (c *Caddy) Healthy(t testing.TB) {
	t.Helper()
	select {
	case <-c.exited:
		t.Errorf("Caddy (pid %d) exited during the test: %v", c.PID(), c.err)
	default:
	}
	if log := c.Log(); strings.Contains(log, "panic") {
		t.Errorf("Caddy (pid %d) logged a panic:\n%s", c.PID(), tail(log, 4000))
	}
}

// globals is the global options block of every Caddy started here: admin on
// a free loopback port, nothing persisted or installed, every site bound to
// 127.0.0.1, no automatic certificates (TLS sites name their certificate
// files) nor HTTP->HTTPS redirects (which would listen on port 80, where
// two Caddys cannot both listen), and HTTP/1.1 and HTTP/2 only (no UDP listener for HTTP/3). The
// second verb takes more lines for the servers block (StartCaddyWith), the
// third more global options (StartCaddyGlobals).
const globals = `{
	admin 127.0.0.1:%d
	persist_config off
	auto_https disable_certs disable_redirects
	default_bind 127.0.0.1
	skip_install_trust
	grace_period 1s
	servers {
		protocols h1 h2
%s	}
%s}
`

// StartCaddy runs the Caddy binary with the global options above followed
// by sites (one or more site blocks, which should name 127.0.0.1 and a port
// from FreePort), waits until it serves, and kills it when the test ends.
func StartCaddy(t testing.TB, sites string) *Caddy {
	t.Helper()
	return StartCaddyWith(t, "", sites)
}

// StartCaddyWith is StartCaddy with serverOptions added to the global
// servers block, one option a line (say "listener_wrappers {\n\th2_scheme\n}").
func StartCaddyWith(t testing.TB, serverOptions, sites string) *Caddy {
	t.Helper()
	c, err := startCaddy(t, serverOptions, "", sites)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// StartCaddyGlobals is StartCaddy with more global options after the
// servers block (say a "servers :8443 {...}" block of one listener's own).
func StartCaddyGlobals(t testing.TB, globalOptions, sites string) *Caddy {
	t.Helper()
	c, err := startCaddy(t, "", globalOptions, sites)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// StartGateway is StartCaddy for a gateway's Caddyfile: the name says
// what the tests start.
func StartGateway(t testing.TB, sites string) *Caddy {
	t.Helper()
	return StartCaddy(t, sites)
}

func startCaddy(t testing.TB, serverOptions, globalOptions, sites string) (*Caddy, error) {
	t.Helper()
	bin := CaddyBinary(t)
	dir := t.TempDir()
	admin := FreePort(t)
	c := &Caddy{
		Admin:  fmt.Sprintf("http://127.0.0.1:%d", admin),
		Dir:    dir,
		Config: fmt.Sprintf(globals, admin, indent(serverOptions, "\t\t"), indent(globalOptions, "\t")) + sites,
		exited: make(chan struct{}),
	}
	file := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(file, []byte(c.Config), 0o600); err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "caddy.log"))
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	c.cmd = exec.Command(bin, "run", "--config", file, "--adapter", "caddyfile")
	c.cmd.Dir = dir
	c.cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
	c.cmd.Stdout, c.cmd.Stderr = logf, logf
	if err := c.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting Caddy: %w", err)
	}
	go func() {
		c.err = c.cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		// Only this process, by its PID.
		c.cmd.Process.Kill()
		<-c.exited
		if t.Failed() {
			t.Logf("log of Caddy (pid %d):\n%s", c.PID(), tail(c.Log(), 3000))
		}
	})

	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-c.exited:
			log := c.Log()
			return nil, fmt.Errorf("Caddy exited at start (%v):\n%s\nCaddyfile:\n%s", c.err, tail(log, 3000), c.Config)
		default:
		}
		if res, err := client.Get(c.Admin + "/config/"); err == nil {
			res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return c, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("Caddy did not start in 30 s:\n%s", tail(c.Log(), 3000))
		}
		time.Sleep(30 * time.Millisecond)
	}
}

// WaitDial waits until addr (host:port) accepts TCP connections.
func WaitDial(t testing.TB, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var d net.Dialer
	for {
		conn, err := d.DialContext(ctx, "tcp", addr)
		if err == nil {
			conn.Close()
			return
		}
		if ctx.Err() != nil {
			t.Fatalf("%s does not accept connections: %v", addr, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// indent puts prefix before each line of s and ends it with a newline.
func indent(s, prefix string) string {
	var b strings.Builder
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		if line != "" {
			b.WriteString(prefix + line + "\n")
		}
	}
	return b.String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return "..." + s[len(s)-n:]
	}
	return s
}
