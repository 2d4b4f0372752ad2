package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// config is the flags, checked: nothing is started before all of them are.
type config struct {
	masters     []int
	recipients  int
	callers     int
	runs        int
	batch       int
	couponLimit int64
	// leaseTerm is a block's longest term (lease.Options.Term).
	leaseTerm time.Duration
	designs   []*design
	added     []string // references run without being named
	core      string
	server    string // a path
	rules     *rules
}

// maxMasters bounds -masters: every master is a process on this machine.
const maxMasters = 64

var cpuList = regexp.MustCompile(`^[0-9]+(-[0-9]+)?(,[0-9]+(-[0-9]+)?)*$`)

// parseFlags parses and checks the command line. The error names the flag.
func parseFlags(args []string, stderr io.Writer) (*config, error) {
	fs := flag.NewFlagSet("clusterbench", flag.ContinueOnError)
	fs.SetOutput(stderr)
	masters := fs.String("masters", "3", "cluster masters, or a comma-separated list of counts (1,3,6): a cluster of each, one after the other")
	recipients := fs.Int("recipients", 20_000, "recipients in the data set (20 sends each)")
	callers := fs.Int("callers", 32, "concurrent callers")
	runs := fs.Int("runs", 3, "runs of each design, alternated; medians are reported")
	batch := fs.Int("batch", 50, "entries in a batch send (batch-all, batch-each and their standalone references)")
	couponLimit := fs.Int64("coupon-limit", 233_300, "seed+coupon: the coupon budget a calendar day, shared by every recipient")
	leaseBlock := fs.Int64("lease", 1000, "seed+coupon: the units of the coupon budget a block leases (the rule's lease)")
	leaseTerm := fs.Duration("lease-term", 24*time.Hour, "seed+coupon: the longest a block is spent for, on the data set's clock (see the package doc)")
	designList := fs.String("designs", designNames(), "designs, comma-separated: "+designNames())
	core := fs.String("redis-core", "0", "CPU list to pin every redis-server to (taskset -c); empty: no pinning")
	server := fs.String("server", envOr("FREQCAP_REDIS_SERVER", "redis-server"), "the server binary (redis-server or valkey-server)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q: every setting is a flag", fs.Args())
	}
	cfg := &config{recipients: *recipients, callers: *callers, runs: *runs, batch: *batch, couponLimit: *couponLimit, core: *core, leaseTerm: *leaseTerm}
	if *leaseTerm <= 0 {
		return nil, fmt.Errorf("-lease-term: %s: must be positive", *leaseTerm)
	}
	var err error
	if cfg.masters, err = parseMasters(*masters); err != nil {
		return nil, err
	}
	for _, c := range []struct {
		name string
		v    int64
	}{{"recipients", int64(*recipients)}, {"callers", int64(*callers)}, {"runs", int64(*runs)}, {"batch", int64(*batch)}, {"coupon-limit", *couponLimit}, {"lease", *leaseBlock}} {
		if c.v < 1 {
			return nil, fmt.Errorf("-%s %d: must be at least 1", c.name, c.v)
		}
	}
	if cfg.designs, cfg.added, err = chooseDesigns(*designList); err != nil {
		return nil, err
	}
	if cfg.rules, err = newRules(cfg.couponLimit, *leaseBlock); err != nil {
		return nil, fmt.Errorf("-coupon-limit, -lease: %w", err)
	}
	if cfg.server, err = exec.LookPath(*server); err != nil {
		return nil, fmt.Errorf("-server %q: %w", *server, err)
	}
	if cfg.core != "" {
		if !cpuList.MatchString(cfg.core) {
			return nil, fmt.Errorf("-redis-core %q: not a CPU list (0, 0-1, 0,2)", cfg.core)
		}
		if _, err := exec.LookPath("taskset"); err != nil {
			return nil, fmt.Errorf("-redis-core %q needs taskset: %w (or pass -redis-core '')", cfg.core, err)
		}
	}
	return cfg, nil
}

// parseMasters parses -masters: counts from 1 to maxMasters.
func parseMasters(list string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(list, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil {
			return nil, fmt.Errorf("-masters %q: %q is not a count", list, f)
		}
		if n < 1 || n > maxMasters {
			return nil, fmt.Errorf("-masters %q: %d is outside 1..%d", list, n, maxMasters)
		}
		out = append(out, n)
	}
	return out, nil
}

// onCluster reports whether any chosen design runs on a cluster.
func (cfg *config) onCluster() bool {
	for _, d := range cfg.designs {
		if d.onCluster {
			return true
		}
	}
	return false
}

// sharded reports whether any chosen design runs on sharded standalone
// servers.
func (cfg *config) sharded() bool {
	for _, d := range cfg.designs {
		if d.sharded {
			return true
		}
	}
	return false
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
