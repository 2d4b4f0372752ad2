package redistest

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"
)

// MixedEnv names the environment variable listing the server builds of a
// mixed cluster (comma-separated binary paths, at least two), as during a
// rolling upgrade: for example a Valkey 8.1 (which has SET … IFEQ) beside
// a Valkey 8.0 or a Redis 7.0 (which have not).
const MixedEnv = "FREQCAP_MIXED_SERVERS"

// MixedServers returns the builds MixedEnv lists, skipping the test when it
// is unset and failing it when a build is not executable.
func MixedServers(tb testing.TB) []string {
	tb.Helper()
	list := os.Getenv(MixedEnv)
	if list == "" {
		tb.Skipf("%s is not set: skipping a test of a cluster of mixed server builds (e.g. %s=/path/valkey-8.1.1/valkey-server,/path/valkey-8.0.1/valkey-server)", MixedEnv, MixedEnv)
	}
	var out []string
	for _, bin := range strings.Split(list, ",") {
		path, err := exec.LookPath(strings.TrimSpace(bin))
		if err != nil {
			tb.Fatalf("%s: %s names no executable server: %v", MixedEnv, bin, err)
		}
		out = append(out, path)
	}
	if len(out) < 2 {
		tb.Fatalf("%s=%s: want at least two builds", MixedEnv, list)
	}
	return out
}

// HasSetIFEQ reports whether the server behind c runs SET … IFEQ (Valkey
// 8.1, Redis 8.4), by trying it on key, which must be one the node serves
// and that nothing else uses: a server without it refuses the syntax. It
// is the tests' own account of the server, apart from the store's.
func HasSetIFEQ(tb testing.TB, c *redis.Client, key string) bool {
	tb.Helper()
	err := c.Do(context.Background(), "SET", key, "probe", "IFEQ", "probe").Err()
	switch {
	case err == nil || err == redis.Nil:
		return true
	case strings.HasPrefix(err.Error(), "ERR syntax error"):
		return false
	}
	tb.Fatalf("SET … IFEQ on %s: %v", c.Options().Addr, err)
	return false
}

// StartBuild is Start with the server binary path instead of
// FREQCAP_REDIS_SERVER's: for a test that needs two builds at once.
func StartBuild(tb testing.TB, path string, args ...string) *Server {
	tb.Helper()
	var lastErr error
	for attempt := 0; attempt < 5; attempt++ {
		port, err := freePort()
		if err != nil {
			tb.Fatalf("finding a free port: %v", err)
		}
		s, err := startOn(tb, path, port, args)
		if err == nil {
			tb.Cleanup(s.Stop)
			return s
		}
		lastErr = err
	}
	tb.Fatalf("starting %s: %v", path, lastErr)
	return nil
}
