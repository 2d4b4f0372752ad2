package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// This file starts and stops the processes measured (Caddy, redis-server),
// pinned to their cores, and reads what CPU time they used.

var (
	caddyPin   string // CPU list Caddy runs on (taskset -c), or ""
	caddyLog   string // when set, names the files Caddy's output is kept in
	cpuProfile string // when set, names the files Caddy's CPU profiles are kept in
	execTrace  string // when set, names the files Caddy's execution traces are kept in
)

type caddyProc struct {
	cmd   *exec.Cmd
	url   string // of the push API
	addr  string // host:port of the push API
	admin int    // admin port: CPU profiles and allocation counters
	label string // the store, for file names
	dir   string
	out   *os.File
}

// startCaddy starts the Caddy of one side (name A or B) of a comparison.
func startCaddy(bin, name string, capped bool, store, redisAddr, label string) (*caddyProc, error) {
	ports := freePorts(3)
	port, upstream, admin := ports[0], ports[1], ports[2]
	dir, err := os.MkdirTemp("", "loadgen")
	if err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	p := &caddyProc{url: "http://" + addr + sendPath, addr: addr, admin: admin, label: label, dir: dir}
	file := filepath.Join(dir, "Caddyfile")
	logName := filepath.Join(dir, "caddy.log")
	if caddyLog != "" {
		logName = fmt.Sprintf("%s.%s-%s", caddyLog, label, name)
	}
	if err = os.WriteFile(file, []byte(config(capped, store, redisAddr, port, upstream, admin)), 0o644); err == nil {
		p.out, err = os.Create(logName)
	}
	if err == nil {
		p.cmd = pinned(caddyPin, bin, "run", "--config", file, "--adapter", "caddyfile")
		// Its own config directory: Caddy autosaves its config there.
		p.cmd.Env = append(p.cmd.Environ(), "XDG_CONFIG_HOME="+dir, "XDG_DATA_HOME="+dir)
		p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
		err = p.cmd.Start()
	}
	if err == nil {
		if err = waitUp(p.url); err != nil {
			out, _ := os.ReadFile(logName)
			err = fmt.Errorf("%v\n%s", err, out)
		}
	}
	if err != nil {
		p.stop()
		return nil, err
	}
	return p, nil
}

func (p *caddyProc) stop() {
	if p.cmd != nil && p.cmd.Process != nil {
		p.cmd.Process.Kill()
		p.cmd.Wait()
	}
	if p.out != nil {
		p.out.Close()
	}
	os.RemoveAll(p.dir)
}

// profile writes Caddy's CPU profile over the next d to file.
func (p *caddyProc) profile(d time.Duration, file string) error {
	return p.record("profile", d, file)
}

// trace writes Caddy's execution trace over the next d to file.
func (p *caddyProc) trace(d time.Duration, file string) error {
	return p.record("trace", d, file)
}

// record writes what /debug/pprof/<kind> gives over the next d to file.
func (p *caddyProc) record(kind string, d time.Duration, file string) error {
	// Whole seconds, rounded up and one more: the slices run a little
	// longer than their length while the last requests are answered.
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/%s?seconds=%d", p.admin, kind, int(math.Ceil(d.Seconds()))+1))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}

// allocated is what a Caddy's Go runtime has allocated since it started.
type allocated struct {
	bytes, objects, gcs float64
}

func (a allocated) minus(b allocated) allocated {
	return allocated{a.bytes - b.bytes, a.objects - b.objects, a.gcs - b.gcs}
}

func (a allocated) plus(b allocated) allocated {
	return allocated{a.bytes + b.bytes, a.objects + b.objects, a.gcs + b.gcs}
}

// allocatedSoFar reads Caddy's allocation counters (runtime.MemStats, from
// the admin endpoint's /debug/vars). On one core, a Caddy's tail latency
// follows its garbage collections, and they follow what it allocates.
func (p *caddyProc) allocatedSoFar() (allocated, error) {
	resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/debug/vars", p.admin))
	if err != nil {
		return allocated{}, err
	}
	defer resp.Body.Close()
	var v struct {
		Memstats struct {
			TotalAlloc, Mallocs uint64
			NumGC               uint32
		} `json:"memstats"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		return allocated{}, fmt.Errorf("reading %s's allocation counters: %w", p.label, err)
	}
	m := v.Memstats
	return allocated{float64(m.TotalAlloc), float64(m.Mallocs), float64(m.NumGC)}, nil
}

type redisProc struct {
	cmd  *exec.Cmd
	addr string
	dir  string
}

// startRedis starts a redis-server on the CPUs of a taskset list; with
// realtime, at real-time priority (chrt -f), so that it runs as soon as a
// request reaches it rather than when the scheduler ends the running
// task's slice: what matters when it shares Caddy's core.
func startRedis(cpus string, realtime bool) (*redisProc, error) {
	port := freePorts(1)[0]
	dir, err := os.MkdirTemp("", "loadgen-redis")
	if err != nil {
		return nil, err
	}
	args := []string{"redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}
	if realtime {
		args = append([]string{"chrt", "-f", "10"}, args...) // chrt execs: the pid stays Redis's
	}
	cmd := pinned(cpus, args[0], args[1:]...)
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	r := &redisProc{cmd, fmt.Sprintf("127.0.0.1:%d", port), dir}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if c, err := net.Dial("tcp", r.addr); err == nil {
			c.Close()
			return r, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.stop()
	if realtime {
		return nil, fmt.Errorf("redis-server did not start on %s (at real-time priority, which takes root or CAP_SYS_NICE)", r.addr)
	}
	return nil, fmt.Errorf("redis-server did not start on %s", r.addr)
}

func (r *redisProc) stop() {
	r.cmd.Process.Kill()
	r.cmd.Wait()
	os.RemoveAll(r.dir)
}

// pinned is a command run on the CPUs of a taskset list (any when ""),
// killed when loadgen dies so that no server is left running on a core.
// taskset execs the command, so its pid is the server's own.
func pinned(cpus, name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	if cpus != "" {
		cmd = exec.Command("taskset", append([]string{"-c", cpus, name}, args...)...)
		// Go sizes its scheduler by the affinity it starts with, and
		// this says so where it shows in the process's environment.
		cmd.Env = append(os.Environ(), "GOMAXPROCS="+strconv.Itoa(cpuCount(cpus)))
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return cmd
}

// cpuCount counts the CPUs of a taskset list such as "0", "0,2" or "0-3".
func cpuCount(list string) int {
	n := 0
	for _, part := range strings.Split(list, ",") {
		lo, hi, ok := strings.Cut(part, "-")
		a, _ := strconv.Atoi(lo)
		b := a
		if ok {
			b, _ = strconv.Atoi(hi)
		}
		n += b - a + 1
	}
	return max(n, 1)
}

// cpuTime is the user and system CPU time the processes have used, from
// /proc/<pid>/stat (clock ticks of 10 ms).
func cpuTime(pids []int) time.Duration {
	var ticks int64
	for _, pid := range pids {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			continue
		}
		// Fields after the command name (which may hold spaces): state is
		// field 3, utime 14, stime 15.
		f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
		if len(f) > 12 {
			u, _ := strconv.ParseInt(f[11], 10, 64)
			s, _ := strconv.ParseInt(f[12], 10, 64)
			ticks += u + s
		}
	}
	return time.Duration(ticks) * 10 * time.Millisecond
}

func waitUp(url string) error {
	for i := 0; i < 200; i++ {
		resp, err := http.Post(url, "application/json", strings.NewReader(`{"to":"warmup","content":"x"}`))
		if err == nil {
			resp.Body.Close()
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("caddy did not come up at %s", url)
}

// freePorts returns n distinct free ports (all held open until all are
// picked, so no two are the same).
func freePorts(n int) []int {
	var ports []int
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			log.Fatal(err)
		}
		defer l.Close()
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports
}
