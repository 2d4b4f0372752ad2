// Command loadgen measures what frequency_cap costs through a real Caddy:
// it starts a Caddy binary with (A) reverse_proxy only and another with (B)
// the same plus frequency_cap and the seed config, and sends JSON push
// bodies for 100k recipients to each, in short slices that alternate
// A B B A A B ..., so that a shared machine's changes of speed fall on both
// alike.
//
// For each store it measures the maximum throughput (closed loop,
// -concurrency connections) and the CPU time Caddy (and, for B, Redis)
// spends a request meanwhile, then the latency of both at one fixed rate:
// -latency-load of A's maximum (open loop). It reports the medians of the
// slices, the throughput ratio B/A (the median of each round's ratio), the
// CPU ratio A/B (the ratio the CPU cost alone would give) and the p99
// latency B adds at the same offered load.
//
// A store is memory, or redis@<cpu list>: the CPUs redis-server is pinned
// to. redis@0 shares Caddy's core, so B pays for Redis's work too; redis@1
// is a Redis of its own, as a gateway in production has (on this 2-core
// machine it shares the load generator's core).
//
//	go build -o /tmp/freqcap-caddy ./cmd/caddy
//	go build -o /tmp/loadgen ./examples/loadgen
//	taskset -c 1 /tmp/loadgen -caddy /tmp/freqcap-caddy   # Caddy on core 0
package main

import (
	"flag"
	"fmt"
	"log"
	"sort"
	"strings"
	"time"
)

func main() {
	caddyBin := flag.String("caddy", "", "Caddy binary built with this module (go build -o /tmp/freqcap-caddy ./cmd/caddy)")
	stores := flag.String("stores", "none,memory,redis@0,redis@1", "what B is: none (A again: the spread of the instrument itself), memory, or redis@<cpu list to pin redis-server to> (redis alone: no pinning)")
	rounds := flag.Int("runs", 12, "rounds per store; a round is one slice of A and one of B, in alternating order")
	slice := flag.Duration("slice", time.Second, "length of one slice")
	concurrency := flag.Int("concurrency", 64, "connections for the maximum-throughput slices")
	recipients := flag.Int("recipients", 100_000, "distinct recipients in the bodies")
	flag.StringVar(&caddyPin, "caddy-core", "0", "CPU list to pin Caddy to with taskset; empty: no pinning. Run loadgen itself on another core.")
	loadShare := flag.Float64("latency-load", 0.5, "share of A's maximum throughput to measure both latencies at")
	flag.StringVar(&cpuProfile, "cpuprofile", "", "write each Caddy's CPU profile over the maximum-throughput slices to <this>.<store>-<A|B> (the admin endpoint is opened for it)")
	flag.StringVar(&caddyLog, "caddy-log", "", "keep each Caddy's output in <this>.<store>-<A|B> (e.g. with GODEBUG=gctrace=1)")
	flag.Parse()
	if *caddyBin == "" {
		log.Fatal("-caddy is required: go build -o /tmp/freqcap-caddy ./cmd/caddy")
	}
	bodies := &bodySource{recipients: *recipients}
	fmt.Printf("| store | A: reverse_proxy req/s | B: + frequency_cap req/s | ratio B/A | A: CPU a request | B: CPU a request (Redis's share) | CPU ratio A/B | latency rate | p99 A | p99 B | added p99 |\n|---|---|---|---|---|---|---|---|---|---|---|\n")
	for _, spec := range strings.Split(*stores, ",") {
		c, err := newComparison(*caddyBin, spec)
		if err != nil {
			log.Fatal(err)
		}
		err = c.run(bodies, *concurrency, *slice, *rounds, *loadShare)
		c.stop()
		if err != nil {
			log.Fatalf("%s: %v", spec, err)
		}
		a, b := c.a, c.b
		fmt.Printf("| %s | %.0f | %.0f | %.3f | %.0f µs | %.0f µs (%.0f µs) | %.3f | %.0f req/s | %.2f ms | %.2f ms | %.2f ms |\n",
			spec, median(a.rates), median(b.rates), c.ratio(), a.cpuPerRequest(), b.cpuPerRequest(), b.redisPerRequest(), a.cpuPerRequest()/b.cpuPerRequest(),
			c.latencyRate, a.p99(), b.p99(), b.p99()-a.p99())
	}
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return s[len(s)/2]
}
