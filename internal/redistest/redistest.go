// Package redistest starts throwaway redis-server processes for tests: on
// 127.0.0.1, a random port, no persistence, stopped when the test ends.
//
// The server binary is FREQCAP_REDIS_SERVER when that is set (a path, best
// absolute since go test runs each package in its own directory, or a
// command name looked up on PATH), for example a valkey-server or a newer
// Redis build to run the same tests against; otherwise redis-server on
// PATH. The same binary runs standalone servers, Sentinel (--sentinel) and
// Cluster nodes. A FREQCAP_REDIS_SERVER that names no executable fails the
// tests that need a server rather than skipping them.
//
// Without redis-server on PATH (and no FREQCAP_REDIS_SERVER) the tests that
// need it skip, saying so; with FREQCAP_REQUIRE_REDIS=1 (as CI sets) they
// fail instead. REDIS_URL, when set, is used instead of starting a server.
// internal/redistest/each-server.sh runs the Redis-backed packages against
// every server build in a directory.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// Server is a running redis-server.
type Server struct {
	Addr string
	Port int
	Dir  string
	cmd  *exec.Cmd
}

// ServerEnv names the environment variable that chooses the server binary.
const ServerEnv = "FREQCAP_REDIS_SERVER"

// need returns the server binary to run: FREQCAP_REDIS_SERVER when set
// (failing the test when it names no executable), else redis-server on
// PATH, skipping the test or, with FREQCAP_REQUIRE_REDIS=1, failing it
// when that is missing.
func need(tb testing.TB) string {
	tb.Helper()
	if bin := os.Getenv(ServerEnv); bin != "" {
		path, err := exec.LookPath(bin)
		if err != nil {
			tb.Fatalf("%s=%s names no executable server: %v", ServerEnv, bin, err)
		}
		return path
	}
	path, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("FREQCAP_REQUIRE_REDIS") == "1" {
			tb.Fatalf("redis-server is not on PATH and FREQCAP_REQUIRE_REDIS=1: install it (apt-get install redis-server)")
		}
		tb.Skip("redis-server is not on PATH: skipping a test that needs a real Redis (set FREQCAP_REQUIRE_REDIS=1 to make this a failure)")
	}
	return path
}

// URL returns REDIS_URL when set, or the URL of a server started for tb.
func URL(tb testing.TB) string {
	tb.Helper()
	if u := os.Getenv("REDIS_URL"); u != "" {
		return u
	}
	return "redis://" + Start(tb).Addr + "/0"
}

// Client returns a client to REDIS_URL or to a server started for tb, with
// its database flushed, closed at the end of the test.
func Client(tb testing.TB) *redis.Client {
	tb.Helper()
	opt, err := redis.ParseURL(URL(tb))
	if err != nil {
		tb.Fatalf("parsing REDIS_URL: %v", err)
	}
	opt.ContextTimeoutEnabled = true
	c := redis.NewClient(opt)
	tb.Cleanup(func() { c.Close() })
	if err := c.FlushDB(context.Background()).Err(); err != nil {
		tb.Fatalf("flushing test database: %v", err)
	}
	return c
}

// Start runs a redis-server for tb with the extra config args given
// ("--name value" pairs) and stops it at the end of the test.
func Start(tb testing.TB, args ...string) *Server {
	tb.Helper()
	return StartBuild(tb, need(tb), args...)
}

func startOn(tb testing.TB, path string, port int, args []string) (*Server, error) {
	dir := tb.TempDir()
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	return launch(path, dir, addr, port, append(baseArgs(port, dir), args...), func() error { return rawPing(addr) })
}

// Stop kills the server and waits for it; calling it twice is harmless.
func (s *Server) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	s.cmd.Process.Kill()
	s.cmd.Wait()
	s.cmd = nil
}

// Restart starts the server again on the same port (after Stop).
func (s *Server) Restart(tb testing.TB, args ...string) {
	tb.Helper()
	n, err := startOn(tb, need(tb), s.Port, args)
	if err != nil {
		tb.Fatalf("restarting redis-server: %v", err)
	}
	s.cmd = n.cmd
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// CPUSeconds is the CPU time the server has used so far
// (used_cpu_user + used_cpu_sys), for benchmarks that report Redis's share.
func CPUSeconds(tb testing.TB, c *redis.Client) float64 {
	tb.Helper()
	info, err := c.Info(context.Background(), "cpu").Result()
	if err != nil {
		tb.Fatalf("reading the server's CPU time: %v", err)
	}
	var cpu float64
	for _, line := range strings.Split(info, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
			f, _ := strconv.ParseFloat(v, 64)
			cpu += f
		}
	}
	return cpu
}
