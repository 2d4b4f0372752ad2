// Command clusterbench sizes a Redis Cluster for the gateway. It starts a
// cluster of -masters masters (redis-server pinned to -redis-core with
// taskset, no replicas), replays a data set through the Redis store on it,
// and reports for each design the decisions a second, the Redis CPU each
// decision costs (used_cpu_user + used_cpu_sys of every master, summed),
// how the masters share that CPU, and the callers' latency:
//
//	seed            the seed config, single sends: one script run on the
//	                recipient's master
//	seed+campaign   the seed config and a budget per campaign (10
//	                campaigns): a second run on the campaign's master,
//	                reserved and rolled back on a denial (a cross-shard rule)
//	batch-all       batch sends of -batch entries under BatchAll (batch
//	                reject), the entries spread over every master: one
//	                pipeline of script runs per master
//	standalone      the seed config on one standalone redis-server on the
//	                same core, as the store decides there (in Go, batched):
//	                the reference the cluster's figures are compared with,
//	                in the same run
//
// The data set is redisbench's: -recipients recipients with 20 sends each
// spread over 24 h and 5 contents each, decided in time order (each
// request carries its time, so a run replays a day in seconds), by
// -callers concurrent callers. Run it on the other core:
//
//	go build -o /tmp/clusterbench ./examples/clusterbench
//	taskset -c 1 /tmp/clusterbench -recipients 20000 -runs 3
//
// On a 2-core machine the masters share one core and the callers the
// other, so the decisions a second are those of one core of Redis (or of
// the callers' core, when it is the busier); Redis CPU per decision is what
// carries over: a master on a core of its own serves about 1,000,000 /
// (CPU µs per decision) decisions a second.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math/rand"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/redisstore"
)

func main() {
	masters := flag.Int("masters", 3, "cluster masters")
	recipients := flag.Int("recipients", 20_000, "recipients in the data set (20 sends each)")
	callers := flag.Int("callers", 32, "concurrent callers")
	runs := flag.Int("runs", 3, "runs of each design, alternated; medians are reported")
	batch := flag.Int("batch", 50, "batch-all: entries in a batch send")
	designs := flag.String("designs", "standalone,seed,seed+campaign,batch-all", "designs, comma-separated: standalone, seed, seed+campaign, batch-all")
	core := flag.String("redis-core", "0", "CPU list to pin the masters to (taskset -c); empty: no pinning")
	server := flag.String("server", envOr("FREQCAP_REDIS_SERVER", "redis-server"), "the server binary")
	flag.Parse()

	c, err := startCluster(*server, *masters, *core, true)
	if err != nil {
		log.Fatal(err)
	}
	defer c.stop()
	log.Printf("cluster of %d masters (%s) on core %q", *masters, c.version, *core)
	standalone, err := startCluster(*server, 1, *core, false)
	if err != nil {
		log.Fatal(err)
	}
	defer standalone.stop()
	data := makeData(*recipients, 20, 5)
	log.Printf("data set: %d recipients × 20 sends over 24 h, 5 contents each: %d decisions", *recipients, len(data))

	results := map[string][]result{}
	names := strings.Split(*designs, ",")
	for run := 0; run < *runs; run++ {
		for _, name := range names {
			target := c
			if name == "standalone" {
				target = standalone
			}
			if err := target.flush(); err != nil {
				log.Fatal(err)
			}
			r, err := target.measure(name, data, *callers, *batch)
			if err != nil {
				log.Fatalf("%s: %v", name, err)
			}
			log.Printf("run %d %-14s %8.0f decisions/s  %5.1f µs Redis CPU/decision  masters' shares %s  p50 %s p99 %s  (Redis core %.0f%% busy)",
				run+1, name, r.rate, r.cpuMicros, shares(r.perMaster), r.p50, r.p99, 100*r.redisBusy)
			results[name] = append(results[name], r)
		}
	}
	fmt.Printf("\n| design | decisions/s (measured) | Redis CPU µs a decision | × standalone's | decisions/s a master on its own core | busiest master's share | p50 / p99 |\n|---|---|---|---|---|---|---|\n")
	// The ratio to standalone is taken run by run (the runs alternate),
	// then its median: the machine's speed drifts between runs.
	for _, name := range names {
		rs := results[name]
		rate := median(rs, func(r result) float64 { return r.rate })
		cpu := median(rs, func(r result) float64 { return r.cpuMicros })
		busiest := median(rs, func(r result) float64 { return maxShare(r.perMaster) })
		ratio := "–"
		if ref := results["standalone"]; len(ref) == len(rs) {
			ratios := make([]result, len(rs))
			for i := range rs {
				ratios[i].cpuMicros = rs[i].cpuMicros / ref[i].cpuMicros
			}
			ratio = fmt.Sprintf("%.1f", median(ratios, func(r result) float64 { return r.cpuMicros }))
		}
		fmt.Printf("| %s | %.0f | %.1f | %s | %.0f | %.0f %% | %s / %s |\n", name, rate, cpu, ratio, 1e6/cpu, 100*busiest, rs[len(rs)/2].p50, rs[len(rs)/2].p99)
	}
}

// send is one decision of the data set.
type send struct {
	at        time.Time
	recipient int
	content   int
}

// makeData is redisbench's data set: sends per recipient at random times
// of one day, contents of their own, in time order.
func makeData(recipients, perRecipient, contents int) []send {
	rng := rand.New(rand.NewSource(1))
	day := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	out := make([]send, 0, recipients*perRecipient)
	for r := 0; r < recipients; r++ {
		for i := 0; i < perRecipient; i++ {
			out = append(out, send{at: day.Add(time.Duration(rng.Int63n(int64(24 * time.Hour)))), recipient: r, content: rng.Intn(contents)})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].at.Before(out[j].at) })
	return out
}

var seedRules = []*limiter.Rule{
	{Name: "recipient_minute", By: []string{"recipient"}, Limit: 15, Window: limiter.Window{Duration: time.Minute}},
	{Name: "recipient_day", By: []string{"recipient"}, Limit: 50, Window: limiter.Window{Duration: 24 * time.Hour}},
	{Name: "same_content_59s", By: []string{"recipient", "content"}, Limit: 2, Window: limiter.Window{Duration: 59 * time.Second}},
	{Name: "same_content_59m", By: []string{"recipient", "content"}, Limit: 5, Window: limiter.Window{Duration: 59 * time.Minute}},
}

var campaignRule = &limiter.Rule{Name: "campaign_day", By: []string{"campaign"}, Limit: 1_000_000_000, Window: limiter.Window{Duration: 24 * time.Hour}}

// request builds s's request; with campaign, the campaign budget too.
func request(s send, campaign bool) limiter.Request {
	who, what := "r"+strconv.Itoa(s.recipient), "c"+strconv.Itoa(s.content)
	r := limiter.Request{Now: s.at}
	for _, rule := range seedRules {
		c := limiter.Check{Rule: rule, Cost: 1, Values: []string{who}}
		if len(rule.By) == 2 {
			c.Values = append(c.Values, what)
		}
		r.Checks = append(r.Checks, c)
	}
	if campaign {
		r.Checks = append(r.Checks, limiter.Check{Rule: campaignRule, Cost: 1, Values: []string{"camp" + strconv.Itoa(s.recipient%10)}})
	}
	return r
}

type result struct {
	rate, cpuMicros, redisBusy float64
	perMaster                  []float64 // each master's share of the CPU
	p50, p99                   time.Duration
}

// measure replays data through a store on the cluster as design name.
func (c *cluster) measure(name string, data []send, callers, batch int) (result, error) {
	cfg := redisstore.Config{Addresses: c.addrs, Cluster: c.cluster, Timeout: 2 * time.Second}
	client, err := cfg.NewClient()
	if err != nil {
		return result{}, err
	}
	defer client.Close()
	s := redisstore.New(client, redisstore.Options{Prefix: "bench:", Timeout: 2 * time.Second})
	defer s.Close()
	ctx := context.Background()
	step := 1
	if name == "batch-all" {
		step = batch
	}
	var next atomic.Int64
	var failed atomic.Int64
	lat := make([][]time.Duration, callers)
	before, err := c.cpu()
	if err != nil {
		return result{}, err
	}
	start := time.Now()
	var wg sync.WaitGroup
	for g := 0; g < callers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(int64(step))) - step
				if i >= len(data) {
					return
				}
				t0 := time.Now()
				var err error
				switch name {
				case "seed", "seed+campaign", "standalone":
					r := request(data[i], name == "seed+campaign")
					_, err = s.Decide(ctx, &r)
				case "batch-all":
					reqs := make([]limiter.Request, 0, step)
					for _, d := range data[i:min(i+step, len(data))] {
						reqs = append(reqs, request(d, false))
					}
					_, err = s.DecideBatch(ctx, reqs, limiter.BatchAll)
				default:
					log.Fatalf("unknown design %q", name)
				}
				lat[g] = append(lat[g], time.Since(t0))
				if err != nil && failed.Add(1) == 1 {
					log.Printf("%s: %v", name, err)
				}
			}
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	after, err := c.cpu()
	if err != nil {
		return result{}, err
	}
	if os.Getenv("CLUSTERBENCH_STATS") != "" {
		st, _ := c.admins[0].Info(ctx, "commandstats").Result()
		log.Printf("%s commandstats of %s:\n%s", name, c.addrs[0], st)
	}
	if n := failed.Load(); n > 0 {
		return result{}, fmt.Errorf("%d calls failed", n)
	}
	var total float64
	r := result{rate: float64(len(data)) / wall.Seconds()}
	for i := range after {
		total += after[i] - before[i]
	}
	for i := range after {
		r.perMaster = append(r.perMaster, (after[i]-before[i])/total)
	}
	r.cpuMicros = total / float64(len(data)) * 1e6
	r.redisBusy = total / wall.Seconds()
	var all []time.Duration
	for _, l := range lat {
		all = append(all, l...)
	}
	sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
	r.p50, r.p99 = all[len(all)/2].Round(time.Microsecond), all[len(all)*99/100].Round(time.Microsecond)
	return r, nil
}

// cluster is the masters this program started (or one standalone
// server, when cluster is false).
type cluster struct {
	cluster bool
	addrs   []string
	procs   []*exec.Cmd
	admins  []*redis.Client
	version string
}

func startCluster(server string, masters int, core string, clustered bool) (*cluster, error) {
	c := &cluster{cluster: clustered}
	for i := 0; i < masters; i++ {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		dir, err := os.MkdirTemp("", "clusterbench")
		if err != nil {
			return nil, err
		}
		args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
			"--dir", dir, "--protected-mode", "no", "--logfile", filepath.Join(dir, "redis.log")}
		if clustered {
			args = append(args, "--cluster-enabled", "yes", "--cluster-config-file", filepath.Join(dir, "nodes.conf"), "--cluster-node-timeout", "5000")
		}
		cmd := exec.Command(server, args...)
		if core != "" {
			cmd = exec.Command("taskset", append([]string{"-c", core, server}, args...)...)
		}
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		c.procs = append(c.procs, cmd)
		addr := fmt.Sprintf("127.0.0.1:%d", port)
		c.addrs = append(c.addrs, addr)
		c.admins = append(c.admins, redis.NewClient(&redis.Options{Addr: addr}))
	}
	ctx := context.Background()
	for _, a := range c.admins {
		if err := waitFor(10*time.Second, func() error { return a.Ping(ctx).Err() }); err != nil {
			c.stop()
			return nil, err
		}
	}
	if !clustered {
		return c, nil
	}
	// The slots evenly, each master with a config epoch of its own, then
	// every node meets every other.
	for i, a := range c.admins {
		lo, hi := i*16384/masters, (i+1)*16384/masters-1
		if err := a.Do(ctx, "CLUSTER", "SET-CONFIG-EPOCH", i+1).Err(); err != nil {
			c.stop()
			return nil, err
		}
		if err := a.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", lo, hi).Err(); err != nil {
			c.stop()
			return nil, err
		}
	}
	for _, a := range c.admins {
		for _, b := range c.addrs {
			host, port, _ := strings.Cut(b, ":")
			if err := a.Do(ctx, "CLUSTER", "MEET", host, port).Err(); err != nil {
				c.stop()
				return nil, err
			}
		}
	}
	err := waitFor(20*time.Second, func() error {
		for _, a := range c.admins {
			info, err := a.ClusterInfo(ctx).Result()
			if err != nil {
				return err
			}
			if !strings.Contains(info, "cluster_state:ok") {
				return fmt.Errorf("%s: cluster not ok", a.Options().Addr)
			}
		}
		return nil
	})
	if err != nil {
		c.stop()
		return nil, err
	}
	info, _ := c.admins[0].Info(ctx, "server").Result()
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

// stop kills the masters this program started.
func (c *cluster) stop() {
	for _, a := range c.admins {
		a.Close()
	}
	for _, p := range c.procs {
		p.Process.Kill()
		p.Wait()
	}
}

// flush empties every master and resets its statistics.
func (c *cluster) flush() error {
	for _, a := range c.admins {
		if err := a.FlushAll(context.Background()).Err(); err != nil {
			return err
		}
	}
	return nil
}

// cpu is each master's used_cpu_user + used_cpu_sys, in seconds.
func (c *cluster) cpu() ([]float64, error) {
	var out []float64
	for _, a := range c.admins {
		info, err := a.Info(context.Background(), "cpu").Result()
		if err != nil {
			return nil, err
		}
		var cpu float64
		for _, line := range strings.Split(info, "\r\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && (k == "used_cpu_user" || k == "used_cpu_sys") {
				f, _ := strconv.ParseFloat(v, 64)
				cpu += f
			}
		}
		out = append(out, cpu)
	}
	return out, nil
}

func waitFor(limit time.Duration, f func() error) error {
	deadline := time.Now().Add(limit)
	for {
		err := f()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		time.Sleep(50 * time.Millisecond)
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

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

func median(rs []result, f func(result) float64) float64 {
	v := make([]float64, len(rs))
	for i, r := range rs {
		v[i] = f(r)
	}
	sort.Float64s(v)
	return v[len(v)/2]
}

func maxShare(s []float64) float64 {
	m := 0.0
	for _, x := range s {
		m = max(m, x)
	}
	return m
}

func shares(s []float64) string {
	parts := make([]string, len(s))
	for i, x := range s {
		parts[i] = fmt.Sprintf("%.0f%%", 100*x)
	}
	return strings.Join(parts, "/")
}
