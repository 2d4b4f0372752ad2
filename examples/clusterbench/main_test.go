package main

import (
	"bytes"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// runMainEnv makes the test binary the bench itself, so that a test runs
// it as a process of its own (its own signals, its own exit) without a go
// build.
const runMainEnv = "CLUSTERBENCH_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// TestRejectsBeforeStarting runs the bench with a bad command line: it
// fails saying what is wrong, and starts no server.
func TestRejectsBeforeStarting(t *testing.T) {
	server := needServer(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"-designs", "seed,foo"}, `-designs: unknown design "foo" (known: standalone, seed, sharded, seed+campaign, seed+coupon, seed+coupon-unleased, standalone-batch, batch-all, standalone-batch-each, batch-each)`},
		{[]string{"-lease", "100000"}, "-coupon-limit, -lease: "},
		{[]string{"-lease-term", "0s"}, "-lease-term: 0s: must be positive"},
		{[]string{"-designs", "seed,seed"}, "-designs: seed listed twice"},
		{[]string{"-masters", "1,0"}, `-masters "1,0": 0 is outside 1..64`},
		{[]string{"-masters", "three"}, `-masters "three": "three" is not a count`},
		{[]string{"-callers", "0"}, "-callers 0: must be at least 1"},
		{[]string{"-batch", "0"}, "-batch 0: must be at least 1"},
		{[]string{"-recipients", "-5"}, "-recipients -5: must be at least 1"},
		{[]string{"-runs", "0"}, "-runs 0: must be at least 1"},
		{[]string{"-coupon-limit", "0"}, "-coupon-limit 0: must be at least 1"},
		{[]string{"-redis-core", "first"}, `-redis-core "first": not a CPU list`},
		{[]string{"-no-such-flag"}, "flag provided but not defined: -no-such-flag"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			b := startBench(t, server, c.args...)
			err := b.wait(t, 10*time.Second)
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != 1 {
				t.Fatalf("exit: %v, want status 1; stderr:\n%s", err, b.stderr.String())
			}
			if !strings.Contains(b.stderr.String(), "clusterbench: "+c.want) {
				t.Errorf("stderr does not say %q:\n%s", c.want, b.stderr.String())
			}
			if started := b.started(); len(started) > 0 {
				t.Errorf("started servers before checking its flags: %v", started)
			}
			b.checkNothingLeft(t)
		})
	}
}

// TestSignalStopsServers interrupts the bench once its servers run: it
// exits non-zero, and no server it started runs on, nor its directory.
func TestSignalStopsServers(t *testing.T) {
	server := needServer(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		t.Run(sig.String(), func(t *testing.T) {
			// Long enough a run that the signal comes during it.
			b := startBench(t, server, "-masters", "1", "-designs", "seed", "-recipients", "20000", "-runs", "1")
			deadline := time.Now().Add(15 * time.Second)
			for !strings.Contains(b.stderr.String(), "cluster of 1 master") {
				if time.Now().After(deadline) {
					t.Fatalf("no cluster after 15 s; stderr:\n%s", b.stderr.String())
				}
				time.Sleep(20 * time.Millisecond)
			}
			started := b.started()
			if len(started) != 2 {
				t.Fatalf("started %v, want the standalone server and 1 master; stderr:\n%s", started, b.stderr.String())
			}
			// The processes running in the bench's directories are the ones
			// it started and will kill: with taskset, the server itself.
			running := b.running(t)
			var pids []int
			for _, s := range started {
				pids = append(pids, s.pid)
				comm, err := os.ReadFile("/proc/" + strconv.Itoa(s.pid) + "/comm")
				if want := filepath.Base(server); err != nil || !strings.HasPrefix(want, strings.TrimSpace(string(comm))) {
					t.Errorf("pid %d is %q (%v), want %s", s.pid, comm, err, want)
				}
			}
			slices.Sort(pids)
			if !slices.Equal(running, pids) {
				t.Errorf("servers running in its directories %v, want the pids it started %v", running, pids)
			}
			if err := b.cmd.Process.Signal(sig); err != nil {
				t.Fatal(err)
			}
			err := b.wait(t, 10*time.Second)
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() == 0 {
				t.Errorf("exit after %s: %v, want a failure; stderr:\n%s", sig, err, b.stderr.String())
			}
			if !strings.Contains(b.stderr.String(), sig.String()+" signal received") {
				t.Errorf("stderr does not name the signal:\n%s", b.stderr.String())
			}
			for _, s := range started {
				if !strings.Contains(b.stderr.String(), "stopped pid "+strconv.Itoa(s.pid)+" ") {
					t.Errorf("pid %d not reported stopped", s.pid)
				}
				if c, err := net.DialTimeout("tcp", s.addr, time.Second); err == nil {
					c.Close()
					t.Errorf("%s still accepts connections", s.addr)
				}
			}
			b.checkNothingLeft(t)
		})
	}
}

// needServer is the server binary, as the repository's Redis tests find
// it: FREQCAP_REDIS_SERVER, else redis-server on PATH; without one the
// test skips, or fails under FREQCAP_REQUIRE_REDIS=1.
func needServer(t *testing.T) string {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the test finds the bench's servers through /proc")
	}
	if bin := os.Getenv("FREQCAP_REDIS_SERVER"); bin != "" {
		path, err := exec.LookPath(bin)
		if err != nil {
			t.Fatalf("FREQCAP_REDIS_SERVER=%s names no executable server: %v", bin, err)
		}
		return path
	}
	path, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("FREQCAP_REQUIRE_REDIS") == "1" {
			t.Fatalf("redis-server is not on PATH and FREQCAP_REQUIRE_REDIS=1: install it (apt-get install redis-server)")
		}
		t.Skip("redis-server is not on PATH: skipping a test that runs the bench's servers (set FREQCAP_REQUIRE_REDIS=1 to make this a failure)")
	}
	return path
}

// bench is the bench running as a process of its own, with a $TMPDIR of
// its own: every server it starts runs in a directory under it.
type bench struct {
	cmd    *exec.Cmd
	tmp    string
	stderr *syncBuffer
	done   chan error
}

func startBench(t *testing.T, server string, args ...string) *bench {
	t.Helper()
	tmp, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	core := "0"
	if _, err := exec.LookPath("taskset"); err != nil {
		core = ""
	}
	b := &bench{tmp: tmp, stderr: &syncBuffer{}, done: make(chan error, 1)}
	b.cmd = exec.Command(os.Args[0], append([]string{"-server", server, "-redis-core", core}, args...)...)
	b.cmd.Env = append(os.Environ(), runMainEnv+"=1", "TMPDIR="+tmp)
	b.cmd.Stderr = b.stderr
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { b.done <- b.cmd.Wait() }()
	t.Cleanup(func() {
		// A failed test still leaves nothing running.
		select {
		case err := <-b.done:
			b.done <- err
		default:
			b.cmd.Process.Signal(syscall.SIGTERM)
			<-b.done
		}
		for _, pid := range b.running(t) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	return b
}

func (b *bench) wait(t *testing.T, limit time.Duration) error {
	t.Helper()
	select {
	case err := <-b.done:
		b.done <- err
		return err
	case <-time.After(limit):
		t.Fatalf("the bench still runs after %s; stderr:\n%s", limit, b.stderr.String())
		return nil
	}
}

type startedServer struct {
	pid  int
	addr string
}

var startedLine = regexp.MustCompile(`started \S+ pid (\d+) on (\S+) in `)

// started is the servers the bench says it started.
func (b *bench) started() []startedServer {
	var out []startedServer
	for _, m := range startedLine.FindAllStringSubmatch(b.stderr.String(), -1) {
		pid, _ := strconv.Atoi(m[1])
		out = append(out, startedServer{pid: pid, addr: m[2]})
	}
	return out
}

// running is the pids of the processes whose working directory is under
// the bench's $TMPDIR: a server chdirs to its --dir.
func (b *bench) running(t *testing.T) []int {
	t.Helper()
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cwd, err := os.Readlink("/proc/" + e.Name() + "/cwd")
		if err == nil && strings.HasPrefix(cwd, b.tmp+string(filepath.Separator)) {
			pids = append(pids, pid)
		}
	}
	slices.Sort(pids)
	return pids
}

// checkNothingLeft checks that no process runs in the bench's directories
// and that it removed them.
func (b *bench) checkNothingLeft(t *testing.T) {
	t.Helper()
	if pids := b.running(t); len(pids) > 0 {
		t.Errorf("processes left running in its directories: %v", pids)
	}
	entries, err := os.ReadDir(b.tmp)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		t.Errorf("left %s in $TMPDIR", e.Name())
	}
}

// syncBuffer is a bytes.Buffer that the process writes while the test
// reads.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.buf.String()
}

// shardedLine is the log line of a sharded run: its shares, a server each.
var shardedLine = regexp.MustCompile(`masters 2 run 1 sharded .* shares (\d+)%/(\d+)% `)

// The sharded control runs on standalone servers of its own, as many as
// the masters, each taking its share of the recipients, and they are
// stopped with the rest.
func TestShardedDecidesOnEveryServerAndStopsThem(t *testing.T) {
	server := needServer(t)
	b := startBench(t, server, "-masters", "2", "-designs", "sharded", "-recipients", "300", "-runs", "1")
	if err := b.wait(t, 60*time.Second); err != nil {
		t.Fatalf("exit: %v; stderr:\n%s", err, b.stderr.String())
	}
	log := b.stderr.String()
	if !strings.Contains(log, "2 standalone servers for sharded") {
		t.Errorf("no standalone servers started for sharded:\n%s", log)
	}
	m := shardedLine.FindStringSubmatch(log)
	if m == nil {
		t.Fatalf("no sharded run with a share a server:\n%s", log)
	}
	for _, share := range m[1:] {
		if share == "0" {
			t.Errorf("a server took no decisions: shares %s%%/%s%%", m[1], m[2])
		}
	}
	// The standalone reference, 2 masters, 2 shards.
	if started := b.started(); len(started) != 5 {
		t.Errorf("started %d servers, want 5; stderr:\n%s", len(started), log)
	}
	for _, s := range b.started() {
		if !strings.Contains(log, "stopped pid "+strconv.Itoa(s.pid)+" ") {
			t.Errorf("pid %d not reported stopped", s.pid)
		}
	}
	b.checkNothingLeft(t)
}
