// Command loadgen measures what frequency_cap costs through a real Caddy:
// it starts a Caddy binary with (A) reverse_proxy only and another with (B)
// the same plus frequency_cap and the seed config, and sends JSON push
// bodies for 100k recipients to each, in short slices that alternate
// A B, B A, A B ..., so that a shared machine's changes of speed fall on
// both alike.
//
// For each store it measures the maximum throughput (closed loop,
// -concurrency connections), the CPU time Caddy (and, for B, Redis) spends
// a request meanwhile and what Caddy allocates a request (on one core its
// tail latency follows its garbage collections), then the p99 latency
// (open loop, each request sent when due by a pacing thread and timed from
// then) of both at -latency-load of A's maximum, with the CPU each spends
// a request there, and of B also at that share of its own maximum. (On one
// core a request costs more at half load than at full load, and B's added
// cost grows more than A's: at "half of its own maximum" B's core is still
// the busier, and its queue, which is what the p99 measures, the longer.)
// Every figure is a median over
// the slices, and every comparison the median over rounds of B's slice
// against A's in the same round: the throughput ratio B/A, the CPU ratio
// A/B (the ratio the CPU cost alone would give), and the p99 latency B
// adds, at the same offered load (where B's core is the busier by what the
// cap costs) and at the same share of each one's maximum (where both are
// equally busy). A slice whose machine stalled moves a median by one place,
// where it would move a pooled p99 by tens of milliseconds. Each paired
// median comes with a 95 % confidence interval that assumes nothing of the
// spread (order statistics, from 6 rounds on): the p99 of a one-second
// slice spreads by milliseconds here, so -latency-runs sets more latency
// rounds than throughput ones.
//
// With -baseline <another Caddy binary>, A is that build with the same
// frequency_cap on a store of its own, alike (for Redis: its own
// redis-server on the same CPUs): B/A is then what a change to the module
// gains or costs, measured side by side.
//
// A store is none (B is A again: the spread of the instrument itself),
// skip (B reads and checks each body, but a dimension no body has skips
// every rule: what the handler costs without a decision), memory, redis
// (unpinned) or redis@<cpu list>: the CPUs redis-server is
// pinned to. redis@0 shares Caddy's core, so B pays for Redis's work too,
// and each round trip waits until the scheduler lets Redis run; redis-rt@0
// is the same with Redis at real-time priority (chrt -f), so that it runs
// as soon as a request reaches it. redis@1 is a Redis of its own, as a
// gateway in production has (on this 2-core machine it shares the load
// generator's core, and its CPU then does not limit B: the CPU ratio
// overstates what B loses).
//
// With -batch N every request is an Expo batch of N messages and B caps
// each of its recipients ({json.*.to}, batch drop): B's CPU a request less
// A's, divided by N, is what the handler costs an entry.
//
//	go build -o /tmp/freqcap-caddy ./cmd/caddy
//	go build -o /tmp/loadgen ./examples/loadgen
//	taskset -c 1 /tmp/loadgen -caddy /tmp/freqcap-caddy   # Caddy on core 0
package main

import (
	"flag"
	"fmt"
	"log"
	"strings"
	"time"
)

func main() {
	caddyBin := flag.String("caddy", "", "Caddy binary built with this module (go build -o /tmp/freqcap-caddy ./cmd/caddy)")
	baseline := flag.String("baseline", "", "another build of Caddy with this module: A runs it with the same cap as B, on a store of its own, instead of reverse_proxy alone")
	stores := flag.String("stores", "none,memory,redis@0,redis@1", "what B is: none (A again: the spread of the instrument itself), skip (frequency_cap reading and checking the body, with every rule skipped: the handler without a decision), memory, redis@<cpu list to pin redis-server to> (redis alone: no pinning), or redis-rt@<cpu list>: the same at real-time priority")
	rounds := flag.Int("runs", 12, "rounds per store; a round is one slice of A and one of B, in alternating order")
	latencyRounds := flag.Int("latency-runs", 0, "rounds of the latency slices; 0: as many as -runs. A p99 over a one-second slice of a shared machine spreads by milliseconds: resolving a fraction of one takes tens of rounds")
	slice := flag.Duration("slice", time.Second, "length of one slice")
	concurrency := flag.Int("concurrency", 64, "connections for the maximum-throughput slices")
	recipients := flag.Int("recipients", 100_000, "distinct recipients in the bodies")
	contents := flag.Int("contents", defaultContents, "distinct contents a recipient's bodies rotate through. Each is capped at 5 in 59 minutes, and every 429 spares B the upstream, so keep 429s rare")
	flag.IntVar(&batchSize, "batch", 0, "send Expo batches of this many messages, capped per recipient ({json.*.to}, batch drop); 0: one message a request")
	flag.StringVar(&caddyPin, "caddy-core", "0", "CPU list to pin Caddy to with taskset; empty: no pinning. Run loadgen itself on another core.")
	loadShare := flag.Float64("latency-load", 0.5, "share of the maximum throughput to measure latency at")
	flag.StringVar(&cpuProfile, "cpuprofile", "", "write each Caddy's CPU profile over the maximum-throughput slices to <this>.<store>-<A|B>, and over the latency slices to <this>.<store>-<A|B>-latency")
	flag.StringVar(&execTrace, "trace", "", "write each Caddy's execution trace over a round of latency slices of its own (left out of the figures) to <this>.<store>-<A|B|B-own> (go tool trace)")
	flag.StringVar(&caddyLog, "caddy-log", "", "keep each Caddy's output in <this>.<store>-<A|B> (e.g. with GODEBUG=gctrace=1)")
	flag.Parse()
	if *caddyBin == "" {
		log.Fatal("-caddy is required: go build -o /tmp/freqcap-caddy ./cmd/caddy")
	}
	switch {
	case !(*loadShare > 0 && *loadShare <= 1): // NaN too
		log.Fatalf("-latency-load %v: a share of the maximum, above 0 and at most 1", *loadShare)
	case *concurrency < 1:
		log.Fatalf("-concurrency %d: at least 1", *concurrency)
	case *recipients < 1:
		log.Fatalf("-recipients %d: at least 1", *recipients)
	case *contents < 1:
		log.Fatalf("-contents %d: at least 1", *contents)
	case batchSize < 0 || batchSize > 65535:
		log.Fatalf("-batch %d: from 0 to 65535", batchSize)
	case *rounds < 1 || *latencyRounds < 0 || *slice <= 0:
		log.Fatalf("-runs %d, -latency-runs %d, -slice %v: at least one round of a slice longer than 0", *rounds, *latencyRounds, *slice)
	}
	if *latencyRounds == 0 {
		*latencyRounds = *rounds
	}
	bodies := &bodySource{recipients: *recipients, contents: *contents}
	if batchSize > 0 {
		fmt.Printf("Each request is an Expo batch of %d messages: divide a request's CPU by %[1]d for an entry's.\n\n", batchSize)
	}
	share := fmt.Sprintf("%.0f %%", *loadShare*100)
	aName, bName := "A: reverse_proxy", "B: + frequency_cap"
	if *baseline != "" {
		aName, bName = "A: -baseline build", "B: -caddy build"
	}
	fmt.Printf("| store | %[2]s req/s | %[3]s req/s | ratio B/A (95 %% interval) | A: CPU a request | B: CPU a request (Redis's share) | CPU ratio A/B (95 %% interval) | p99 A at %[1]s of its maximum (median slice) | p99 B at that rate | added p99 (95 %% interval) | CPU a request at that rate, A / B (Redis's share) | B − A (95 %% interval) | p99 B at %[1]s of its own maximum | added p99 (95 %% interval) | B's 429s | Caddy allocated a request, A / B | GCs a 1,000 requests, A / B |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n", share, aName, bName)
	for _, spec := range strings.Split(*stores, ",") {
		c, err := newComparison(*caddyBin, *baseline, spec)
		if err != nil {
			log.Fatal(err)
		}
		err = c.run(bodies, *concurrency, *slice, *rounds, *latencyRounds, *loadShare)
		c.stop()
		if err != nil {
			log.Fatalf("%s: %v", spec, err)
		}
		a, b := c.a, c.b
		akb, aobj, agc := a.allocPerRequest()
		bkb, bobj, bgc := b.allocPerRequest()
		fmt.Printf("| %s | %.0f | %.0f | %s | %.0f µs | %.0f µs (%.0f µs) | %s | %.2f ms (%.0f req/s) | %.2f ms | %s ms | %.0f / %.0f µs (%.0f µs) | %s µs | %.2f ms (%.0f req/s) | %s ms | %d | %.1f / %.1f KB (%.0f / %.0f objects) | %.1f / %.1f |\n",
			spec, median(a.rates), median(b.rates), paired(b.rates, a.rates, ratio).format("%.3f"),
			median(a.cpus), median(b.cpus), median(b.rcpus), paired(a.cpus, b.cpus, ratio).format("%.3f"),
			median(a.p99s), c.latencyRate, median(b.p99s), paired(b.p99s, a.p99s, diff).format("%+.2f"),
			median(a.latCPUs), median(b.latCPUs), median(b.latRCPU), paired(b.latCPUs, a.latCPUs, diff).format("%+.0f"),
			median(b.p99sOwn), c.ownRate, paired(b.p99sOwn, a.p99s, diff).format("%+.2f"), b.denied,
			akb, bkb, aobj, bobj, agc, bgc)
	}
}
