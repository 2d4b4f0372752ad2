// Command loadgen measures what frequency_cap costs through a real Caddy:
// it starts a Caddy binary with (A) reverse_proxy only and (B) the same
// with frequency_cap and the seed config, alternating A B A B, and sends
// JSON push bodies for 100k recipients at each.
//
// For each store (memory, redis) and run it measures the maximum throughput
// (closed loop, -concurrency connections, -duration) and the CPU time Caddy
// and Redis spend a request meanwhile, then the latency at half of the
// maximum (open loop, a fixed rate), and reports medians, the throughput
// ratio B/A, the CPU ratio A/B (the throughput ratio the CPU cost alone
// would give: steadier when other tenants share the machine) and the p99
// latency B adds.
//
//	go build -o /tmp/freqcap-caddy ./cmd/caddy
//	go build -o /tmp/loadgen ./examples/loadgen
//	taskset -c 1 /tmp/loadgen -caddy /tmp/freqcap-caddy -runs 3   # Caddy and Redis on core 0
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

func main() {
	caddyBin := flag.String("caddy", "", "Caddy binary built with this module (go build -o /tmp/freqcap-caddy ./cmd/caddy)")
	stores := flag.String("stores", "memory,redis", "stores to measure B with: memory, redis")
	runs := flag.Int("runs", 3, "A/B pairs per store; medians are reported")
	duration := flag.Duration("duration", 8*time.Second, "length of each measurement")
	concurrency := flag.Int("concurrency", 64, "connections for the maximum-throughput phase")
	recipients := flag.Int("recipients", 100_000, "distinct recipients in the bodies")
	core := flag.String("caddy-core", "0", "CPU list to pin Caddy (and Redis) to with taskset; empty: no pinning. Run loadgen itself on another core.")
	flag.Float64Var(&loadShare, "latency-load", 0.5, "share of the maximum throughput to measure latency at")
	flag.StringVar(&caddyLog, "caddy-log", "", "keep each Caddy's output in <this>.<store>-<capped> (e.g. with GODEBUG=gctrace=1)")
	flag.Parse()
	pin = *core
	if *caddyBin == "" {
		log.Fatal("-caddy is required: go build -o /tmp/freqcap-caddy ./cmd/caddy")
	}
	bodies := &bodySource{recipients: *recipients}
	fmt.Printf("| store | A: reverse_proxy req/s | B: + frequency_cap req/s | ratio B/A | A: CPU a request | B: CPU a request | CPU ratio A/B | p99 A at half load | p99 B at half load | added p99 |\n|---|---|---|---|---|---|---|---|---|---|\n")
	for _, store := range strings.Split(*stores, ",") {
		var srv *redisProc
		if store == "redis" {
			var err error
			if srv, err = startRedis(); err != nil {
				log.Fatal(err)
			}
			defer srv.Process.Kill()
		}
		var ra, rb, pa, pb, ca, cb []float64
		for run := 0; run < *runs; run++ {
			for _, capped := range []bool{false, true} {
				m, err := measure(*caddyBin, capped, srv, bodies, *concurrency, *duration)
				if err != nil {
					log.Fatal(err)
				}
				name := "A"
				if capped {
					name = "B"
					rb, pb, cb = append(rb, m.max), append(pb, m.p99), append(cb, m.cpu)
				} else {
					ra, pa, ca = append(ra, m.max), append(pa, m.p99), append(ca, m.cpu)
				}
				log.Printf("%s run %d %s: %.0f req/s max (%.0f µs CPU a request), p99 %.2f ms at half load", store, run+1, name, m.max, m.cpu, m.p99)
			}
		}
		fmt.Printf("| %s | %.0f | %.0f | %.3f | %.0f µs | %.0f µs | %.3f | %.2f ms | %.2f ms | %.2f ms |\n",
			store, median(ra), median(rb), median(rb)/median(ra), median(ca), median(cb), median(ca)/median(cb),
			median(pa), median(pb), median(pb)-median(pa))
	}
}

func median(v []float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// bodySource makes push bodies: request i goes to one of 100k recipients,
// with one of five contents of that recipient, so a cap denies rarely and
// A and B pass (nearly) the same requests upstream.
type bodySource struct {
	recipients int
	next       atomic.Uint64
}

func (b *bodySource) body() []byte {
	i := b.next.Add(1)
	h := i * 0x9E3779B97F4A7C15
	r := (h >> 16) % uint64(b.recipients)
	return fmt.Appendf(nil, `{"to":"user-%d","content":"content-%d-%d","title":"Your order has shipped","amount":1}`, r, r%97, (h>>8)%5)
}

// pin is the CPU list Caddy and Redis run on (taskset -c), or "".
var pin string

// caddyLog, when set, names the files Caddy's output is kept in.
var caddyLog string

// loadShare is the share of the maximum throughput latency is measured at.
var loadShare = 0.5

func pinned(name string, args ...string) *exec.Cmd {
	if pin == "" {
		return exec.Command(name, args...)
	}
	cmd := exec.Command("taskset", append([]string{"-c", pin, name}, args...)...)
	// Go sizes its scheduler (and its GC workers) by the machine, not by
	// the affinity: tell Caddy how many cores it really has.
	cmd.Env = append(os.Environ(), "GOMAXPROCS="+strconv.Itoa(cpuCount(pin)))
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

const upstreamSite = `
:%d {
	respond "{\"status\":\"queued\"}" 200
}
`

func config(capped bool, store, redisAddr string, port, upstream int) string {
	var b strings.Builder
	b.WriteString("{\n\tadmin off\n\tdefault_bind 127.0.0.1\n\tauto_https off\n}\n")
	fmt.Fprintf(&b, ":%d {\n", port)
	if capped {
		b.WriteString("\tfrequency_cap /v1/send* {\n\t\tname push\n")
		if store == "redis" {
			fmt.Fprintf(&b, "\t\tredis redis://%s/0\n", redisAddr)
		}
		b.WriteString(`		dimension recipient {json.to}
		dimension content {json.content}
		rule recipient_minute {
			by recipient
			limit 15
			window 1m
		}
		rule recipient_day {
			by recipient
			limit 50
			window 24h
		}
		rule same_content_59s {
			by recipient content
			limit 2
			window 59s
		}
		rule same_content_59m {
			by recipient content
			limit 5
			window 59m
		}
	}
`)
	}
	// The upstream keep-alive pool is sized for the connections the load
	// has: with Caddy's default of 32 idle connections a host, the bursts
	// of admissions that a batch of decisions releases at once closed and
	// re-dialled upstream connections (thousands in TIME-WAIT a second),
	// which charged B for TCP handshakes rather than for its decisions.
	fmt.Fprintf(&b, "\treverse_proxy 127.0.0.1:%d {\n\t\ttransport http {\n\t\t\tkeepalive_idle_conns_per_host 256\n\t\t}\n\t}\n}\n", upstream)
	fmt.Fprintf(&b, upstreamSite, upstream)
	return b.String()
}

// measurement is one run of A or B.
type measurement struct {
	max float64 // req/s, closed loop
	cpu float64 // µs of CPU (Caddy and Redis) a request at max
	p99 float64 // ms, at half of max
}

// measure starts Caddy with config A or B and returns its maximum
// throughput, the CPU it and Redis (srv, nil for the memory store) spent a request
// then, and its p99 latency at half of that throughput. The CPU figure is
// the steadier on a shared machine: what other tenants take lowers the
// throughput, not the CPU a request costs.
func measure(bin string, capped bool, srv *redisProc, bodies *bodySource, conc int, d time.Duration) (measurement, error) {
	store, redisAddr, pids := "memory", "", []int{}
	if srv != nil {
		store, redisAddr, pids = "redis", srv.addr, append(pids, srv.Process.Pid)
	}
	port, upstream := freePort(), freePort()
	dir, err := os.MkdirTemp("", "loadgen")
	if err != nil {
		return measurement{}, err
	}
	defer os.RemoveAll(dir)
	file := filepath.Join(dir, "Caddyfile")
	if err := os.WriteFile(file, []byte(config(capped, store, redisAddr, port, upstream)), 0o644); err != nil {
		return measurement{}, err
	}
	cmd := pinned(bin, "run", "--config", file, "--adapter", "caddyfile")
	logName := filepath.Join(dir, "caddy.log")
	if caddyLog != "" {
		logName = fmt.Sprintf("%s.%s-%v", caddyLog, store, capped)
	}
	logf, _ := os.Create(logName)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return measurement{}, err
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	url := fmt.Sprintf("http://127.0.0.1:%d/v1/send", port)
	if err := waitUp(url); err != nil {
		out, _ := os.ReadFile(logName)
		return measurement{}, fmt.Errorf("%v\n%s", err, out)
	}
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: conc * 2, MaxConnsPerHost: conc * 2}}
	// Warm up connections and code paths.
	load(client, url, bodies, conc, time.Second, 0)
	pids = append(pids, cmd.Process.Pid) // taskset execs Caddy: one pid
	cpu0 := cpuTime(pids)
	max, _, errs, n := load(client, url, bodies, conc, d, 0)
	cpu := (cpuTime(pids) - cpu0).Seconds() * 1e6 / float64(n)
	if errs > 0 {
		return measurement{}, fmt.Errorf("%d requests failed at full load", errs)
	}
	_, p99, errs, _ := load(client, url, bodies, conc, d, max*loadShare)
	if errs > 0 {
		return measurement{}, fmt.Errorf("%d requests failed at half load", errs)
	}
	return measurement{max: max, cpu: cpu, p99: p99}, nil
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

// load sends for d: closed loop with conc workers when rate is 0, else
// open loop at rate requests a second. It returns the throughput, the p99
// latency in ms, the number of transport errors and of requests answered.
func load(client *http.Client, url string, bodies *bodySource, conc int, d time.Duration, rate float64) (float64, float64, int, int) {
	var errs atomic.Int64
	var mu sync.Mutex
	var lat []time.Duration
	deadline := time.Now().Add(d)
	one := func() {
		body := bodies.body()
		start := time.Now()
		resp, err := client.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			errs.Add(1)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		el := time.Since(start)
		mu.Lock()
		lat = append(lat, el)
		mu.Unlock()
	}
	start := time.Now()
	var wg sync.WaitGroup
	if rate == 0 {
		for w := 0; w < conc; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for time.Now().Before(deadline) {
					one()
				}
			}()
		}
	} else {
		interval := time.Duration(float64(time.Second) / rate)
		for t := time.Now(); t.Before(deadline); t = t.Add(interval) {
			time.Sleep(time.Until(t))
			wg.Add(1)
			go func() {
				defer wg.Done()
				one()
			}()
		}
	}
	wg.Wait()
	elapsed := time.Since(start)
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	var p99 float64
	if len(lat) > 0 {
		p99 = float64(lat[len(lat)*99/100]) / float64(time.Millisecond)
	}
	return float64(len(lat)) / elapsed.Seconds(), p99, int(errs.Load()), len(lat)
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

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

type redisProc struct {
	*exec.Cmd
	addr string
}

func startRedis() (*redisProc, error) {
	port := freePort()
	dir, err := os.MkdirTemp("", "loadgen-redis")
	if err != nil {
		return nil, err
	}
	cmd := pinned("redis-server", "--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir)
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		if c, err := net.Dial("tcp", addr); err == nil {
			c.Close()
			return &redisProc{cmd, addr}, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	cmd.Process.Kill()
	return nil, fmt.Errorf("redis-server did not start on %s", addr)
}
