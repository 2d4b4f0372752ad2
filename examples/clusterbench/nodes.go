package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// node is one redis-server this program started, and the directory it
// made for it.
type node struct {
	addr  string
	dir   string
	cmd   *exec.Cmd
	admin *redis.Client
}

// stop kills the server, waits for it and removes its directory; a second
// stop does nothing. SIGKILL, since it keeps nothing on disk. taskset execs
// the server, so the process started is the server itself (start checks
// that the server's process_id is the one started).
func (n *node) stop(logger *log.Logger) error {
	if n.admin != nil {
		n.admin.Close()
		n.admin = nil
	}
	if n.cmd != nil {
		if err := n.cmd.Process.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
			return fmt.Errorf("stopping %s (pid %d): %w", n.addr, n.cmd.Process.Pid, err)
		}
		n.cmd.Wait() // its exit status is the kill's
		logger.Printf("stopped pid %d on %s", n.cmd.Process.Pid, n.addr)
		n.cmd = nil
	}
	if n.dir != "" {
		if err := os.RemoveAll(n.dir); err != nil {
			return fmt.Errorf("removing %s: %w", n.dir, err)
		}
		n.dir = ""
	}
	return nil
}

// cluster is the masters of a Redis Cluster that this program started, or
// one standalone server when clustered is false.
type cluster struct {
	logger    *log.Logger
	clustered bool
	nodes     []*node
	version   string
}

// stop stops every node started so far; a second stop does nothing.
func (c *cluster) stop() error {
	var errs []error
	for _, n := range c.nodes {
		errs = append(errs, n.stop(c.logger))
	}
	return errors.Join(errs...)
}

func (c *cluster) addrs() []string {
	out := make([]string, len(c.nodes))
	for i, n := range c.nodes {
		out[i] = n.addr
	}
	return out
}

// startCluster starts count servers, each in a directory of its own under
// $TMPDIR, pinned to cfg.core, and when clustered makes them the masters
// of one cluster, the slots shared evenly (one master holds them all when
// count is 1). On an error it stops what it started.
func startCluster(ctx context.Context, cfg *config, count int, clustered bool, logger *log.Logger) (c *cluster, err error) {
	c = &cluster{logger: logger, clustered: clustered}
	defer func() {
		if err != nil {
			err = errors.Join(err, c.stop())
			c = nil
		}
	}()
	for i := 0; i < count; i++ {
		if err := c.startNode(cfg); err != nil {
			return c, err
		}
	}
	for _, n := range c.nodes {
		if err := n.await(ctx); err != nil {
			return c, err
		}
	}
	if clustered {
		if err := c.join(ctx); err != nil {
			return c, err
		}
	}
	info, err := c.nodes[0].admin.Info(ctx, "server").Result()
	if err != nil {
		return c, err
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "redis_version:"); ok && c.version == "" {
			c.version = "redis " + v
		}
		if v, ok := strings.CutPrefix(line, "valkey_version:"); ok {
			c.version = "valkey " + v
		}
	}
	return c, nil
}

// startNode starts one server. The node joins c before anything that can
// fail, so that c.stop removes whatever part of it exists.
func (c *cluster) startNode(cfg *config) error {
	dir, err := os.MkdirTemp("", "clusterbench-")
	if err != nil {
		return err
	}
	n := &node{dir: dir}
	c.nodes = append(c.nodes, n)
	port, err := freePort()
	if err != nil {
		return err
	}
	n.addr = "127.0.0.1:" + strconv.Itoa(port)
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
		"--dir", dir, "--protected-mode", "no", "--logfile", filepath.Join(dir, "redis.log")}
	if c.clustered {
		args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--cluster-node-timeout", "5000")
	}
	cmd := exec.Command(cfg.server, args...)
	if cfg.core != "" {
		cmd = exec.Command("taskset", append([]string{"-c", cfg.core, cfg.server}, args...)...)
	}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting %s: %w", cfg.server, err)
	}
	n.cmd = cmd
	n.admin = redis.NewClient(&redis.Options{Addr: n.addr})
	c.logger.Printf("started %s pid %d on %s in %s", filepath.Base(cfg.server), cmd.Process.Pid, n.addr, dir)
	return nil
}

// await waits for n to answer, and checks that the server answering is the
// process started: another program may have taken the port between
// freePort and the server's bind, and taskset must have exec'd (stop kills
// the process started).
func (n *node) await(ctx context.Context) error {
	err := waitFor(ctx, 10*time.Second, func() error { return n.admin.Ping(ctx).Err() })
	if err != nil {
		return fmt.Errorf("%s (pid %d) does not answer: %w; its log ends:\n%s", n.addr, n.cmd.Process.Pid, err, logTail(n.dir))
	}
	info, err := n.admin.Info(ctx, "server").Result()
	if err != nil {
		return err
	}
	pid := infoField(info, "process_id")
	if pid != strconv.Itoa(n.cmd.Process.Pid) {
		return fmt.Errorf("%s answers from process %s, not from the server started (pid %d)", n.addr, pid, n.cmd.Process.Pid)
	}
	return nil
}

// join makes c's nodes one cluster: the slots evenly, each master with a
// config epoch of its own, then every node meets every other.
func (c *cluster) join(ctx context.Context) error {
	count := len(c.nodes)
	for i, n := range c.nodes {
		lo, hi := i*16384/count, (i+1)*16384/count-1
		if err := n.admin.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			return fmt.Errorf("%s: %w", n.addr, err)
		}
		if err := n.admin.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			return fmt.Errorf("%s: %w", n.addr, err)
		}
	}
	for _, a := range c.nodes {
		for _, b := range c.nodes {
			if a == b {
				continue
			}
			host, port, _ := strings.Cut(b.addr, ":")
			if err := a.admin.Do(ctx, "CLUSTER", "MEET", host, port).Err(); err != nil {
				return fmt.Errorf("%s: %w", a.addr, err)
			}
		}
	}
	return waitFor(ctx, 20*time.Second, func() error {
		for _, n := range c.nodes {
			info, err := n.admin.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("%s: cluster not ok", n.addr)
			}
		}
		return nil
	})
}

// flush empties every node.
func (c *cluster) flush(ctx context.Context) error {
	for _, n := range c.nodes {
		if err := n.admin.FlushAll(ctx).Err(); err != nil {
			return err
		}
	}
	return nil
}

// usage is what one node has spent so far, from INFO.
type usage struct {
	cpu float64 // used_cpu_user + used_cpu_sys, in seconds
	// inside is the µs spent executing commands (INFO stats
	// eventloop_duration_cmd_sum: a script once, the commands it calls
	// included, which commandstats would count twice); the rest of cpu
	// is the event loop (reading and parsing requests, writing replies,
	// the system calls of each wake-up) and the server's timers. wakeups
	// is the event loop's cycles (eventloop_cycles). Both are -1 when the
	// server does not say (Redis before 7.2).
	inside, wakeups float64
}

// usage is each node's usage so far.
func (c *cluster) usage(ctx context.Context) ([]usage, error) {
	var out []usage
	for _, n := range c.nodes {
		info, err := n.admin.Info(ctx, "cpu", "stats").Result()
		if err != nil {
			return nil, err
		}
		out = append(out, parseUsage(info))
	}
	return out, nil
}

func parseUsage(info string) usage {
	u := usage{inside: -1, wakeups: -1}
	var user, sys float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		f, _ := strconv.ParseFloat(v, 64)
		switch k {
		case "used_cpu_user":
			user = f
		case "used_cpu_sys":
			sys = f
		case "eventloop_duration_cmd_sum":
			u.inside = f
		case "eventloop_cycles":
			u.wakeups = f
		}
	}
	u.cpu = user + sys
	return u
}

// holding is the index of the node that holds key, or -1.
func (c *cluster) holding(ctx context.Context, key string) (int, error) {
	for i, n := range c.nodes {
		k, err := n.admin.Exists(ctx, key).Result()
		if _, moved := redis.IsMovedError(err); moved {
			continue // another node's slot
		}
		if err != nil {
			return -1, err
		}
		if k == 1 {
			return i, nil
		}
	}
	return -1, nil
}

func infoField(info, name string) string {
	for _, line := range strings.Split(info, "\r\n") {
		if k, v, ok := strings.Cut(line, ":"); ok && k == name {
			return v
		}
	}
	return ""
}

// logTail is the end of a node's log, for an error saying why it did not
// start (the directory goes with the node).
func logTail(dir string) string {
	b, err := os.ReadFile(filepath.Join(dir, "redis.log"))
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	return string(b[max(0, len(b)-1000):])
}

// waitFor calls f until it succeeds, limit passes or ctx ends.
func waitFor(ctx context.Context, limit time.Duration, f func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		if time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
