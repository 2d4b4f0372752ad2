// Command clusterbench sizes a Redis Cluster for the gateway. It starts a
// cluster of masters (redis-server pinned to -redis-core with taskset, no
// replicas) and one standalone redis-server on the same core, replays a
// data set through the Redis store (limiter/redisstore) design by design,
// and reports for each design the decisions a second, the Redis CPU each
// decision costs (used_cpu_user + used_cpu_sys of every master, summed),
// how much of it went to executing commands and how many event-loop
// wake-ups a decision costs (INFO stats eventloop_duration_cmd_sum and
// eventloop_cycles: Valkey 8, Redis 7.2 on), how the masters share that CPU, and the
// callers' latency. The rest of the CPU is the event loop: each wake-up
// reads, parses and answers a round trip, and on a VM its system calls
// cost more than the commands (redisbench -roundtrips: a PING costs Redis
// about 40 µs here when it wakes it).
//
// The designs (-designs, comma-separated; all of them by default):
//
//	standalone             the seed config on the standalone server, single
//	                       sends, as the store decides there (in Go,
//	                       batched): the reference of seed, sharded,
//	                       seed+campaign and seed+coupon
//	seed                   the seed config, single sends: decided on the
//	                       recipient's master's lane, with the others
//	                       waiting there
//	sharded                the seed config, single sends, on as many
//	                       standalone servers as the cluster has masters,
//	                       on the same core, each with its own store (the
//	                       gateway shards by recipient): a control that
//	                       shows what splitting the callers over several
//	                       servers on one core costs without a cluster
//	seed+campaign          the seed config and a budget per campaign (10
//	                       campaigns): a second run on the campaign's
//	                       master, reserved and rolled back on a denial (a
//	                       cross-shard rule)
//	seed+coupon            the seed config and the seeds' coupon budget:
//	                       rule coupon_day, by coupon, one value
//	                       (coupon123456) so one key for every recipient,
//	                       -coupon-limit a calendar day in UTC, leased in
//	                       blocks of -lease units (limiter/lease): a block
//	                       costs one run on that key's master, the sends it
//	                       covers none. Its table also gives the share of
//	                       the master that holds the key (found after the
//	                       run)
//	seed+coupon-unleased   the same without leasing: a second run on that
//	                       key's master for every decision
//	standalone-batch       batch sends of -batch entries under BatchAll
//	                       (batch reject) on the standalone server: the
//	                       reference of batch-all
//	batch-all              batch sends under BatchAll, the entries spread
//	                       over every master: one pipeline of script runs a
//	                       master
//	standalone-batch-each  batch sends under BatchEach (batch drop) on the
//	                       standalone server: the reference of batch-each
//	batch-each             batch sends under BatchEach on the cluster
//
// A cluster design's reference runs too when -designs does not name it.
// The runs alternate design by design, the standalone references on the
// same core as the masters, and each cluster design's "× its reference" is
// its Redis CPU a decision over its reference's, run by run, then the
// median: single sends against single sends, batch entries against batch
// entries (a decision is an entry).
//
// The data set is redisbench's: -recipients recipients with 20 sends each
// spread over 24 h and 5 contents each, decided in time order (each
// request carries its time, so a run replays a day in seconds), by
// -callers concurrent callers. With 20 sends a recipient the coupon budget
// cannot bind below 11,665 recipients (233,300 / 20): there seed+coupon
// measures what the shared key costs, and a smaller -coupon-limit makes it
// deny.
//
// Flags:
//
//	-masters 3             masters in the cluster, or a comma-separated list
//	                       of counts (1,3,6): a cluster of each in turn,
//	                       stopped before the next, a table each and a
//	                       summary line a design across them; a 1-master
//	                       cluster is a real one (cluster-enabled, every
//	                       slot on one node)
//	-recipients 20000      recipients in the data set
//	-callers 32            concurrent callers
//	-runs 3                runs of each design, alternated; medians reported
//	-batch 50              entries in a batch send
//	-coupon-limit 233300   the coupon budget a calendar day
//	-lease 1000            seed+coupon: the units of the coupon budget a
//	                       block leases
//	-lease-term 24h        seed+coupon: the longest a block is spent for.
//	                       Terms are measured on the data set's clock, which
//	                       replays a day in seconds: at its 20 sends a
//	                       recipient a day, a real 5-minute term would cover
//	                       a few hundred sends of the whole data set, where a
//	                       gateway sending 4 a second or more spends a block
//	                       of 1,000 within its term. 24h spends blocks whole,
//	                       as such a gateway does
//	-designs …             the designs above, comma-separated
//	-redis-core 0          CPU list for taskset -c; empty: no pinning
//	-server redis-server   the server binary (default $FREQCAP_REDIS_SERVER,
//	                       else redis-server on PATH); a valkey-server works
//
// CLUSTERBENCH_STATS=1 logs the first master's commandstats after each run.
//
// Every flag is checked before anything starts. Each server runs in a
// directory of its own under $TMPDIR; every way out (an error, SIGINT,
// SIGTERM) stops the servers the bench started and removes their
// directories, and an interrupted bench exits non-zero.
//
// Run it on the other core:
//
//	go build -o /tmp/clusterbench ./examples/clusterbench
//	taskset -c 1 /tmp/clusterbench -recipients 5000 -runs 1
//	taskset -c 1 /tmp/clusterbench -recipients 5000 -runs 1 -masters 1,3,6
//	taskset -c 1 /tmp/clusterbench -recipients 5000 -runs 1 -server /path/to/valkey-server
//
// On a 2-core machine the masters share one core and the callers the
// other, so the decisions a second are those of one core of Redis (or of
// the callers' core, when it is the busier); Redis CPU per decision is what
// carries over: a master on a core of its own serves about 1,000,000 /
// (CPU µs per decision) decisions a second.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil && !errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(os.Stderr, "clusterbench:", err)
		os.Exit(1)
	}
}

// run is the bench. Past the flags' checks every error, ctx's end
// included, returns through the stops of what was started.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) (err error) {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		return err
	}
	logger := log.New(stderr, "", log.LstdFlags)
	for _, name := range cfg.added {
		logger.Printf("running %s too: a design compared with it was chosen", name)
	}
	data := makeData(cfg.recipients, 20, 5)
	logger.Printf("data set: %d recipients × 20 sends over 24 h, 5 contents each: %d decisions", cfg.recipients, len(data))
	standalone, err := startCluster(ctx, cfg, 1, false, logger)
	if err != nil {
		return fmt.Errorf("starting the standalone server: %w", err)
	}
	defer func() { err = errors.Join(err, standalone.stop()) }()
	logger.Printf("standalone server %s (%s) on core %q", standalone.nodes[0].addr, standalone.version, cfg.core)
	counts := cfg.masters
	if !cfg.onCluster() {
		counts = []int{0} // no cluster to start
	}
	printReferences(stdout, cfg)
	var tables []*table
	for _, count := range counts {
		t, err := runOn(ctx, cfg, count, standalone, data, logger)
		if err != nil {
			return err
		}
		printTable(stdout, cfg, t, len(data))
		tables = append(tables, t)
	}
	printSummary(stdout, cfg, tables)
	return nil
}

// stopped is err, or why ctx ended when it has (the signal received):
// whichever step of a run meets a signal first, a command or the replay,
// the bench says it was stopped, not that a command was canceled.
func stopped(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return context.Cause(ctx)
	}
	return err
}

// runOn starts a cluster of count masters (none when count is 0), runs
// every design on it or on standalone, alternated, and stops it.
func runOn(ctx context.Context, cfg *config, count int, standalone *cluster, data []send, logger *log.Logger) (t *table, err error) {
	t = &table{masters: count, results: map[string][]result{}}
	var c *cluster
	if count > 0 {
		if c, err = startCluster(ctx, cfg, count, true, logger); err != nil {
			return nil, fmt.Errorf("starting a cluster of %d masters: %w", count, err)
		}
		defer func() { err = errors.Join(err, c.stop()) }()
		t.version = c.version
		logger.Printf("cluster of %d master%s (%s) on core %q", count, plural(count), c.version, cfg.core)
	}
	var shards *cluster
	if count > 0 && cfg.sharded() {
		if shards, err = startCluster(ctx, cfg, count, false, logger); err != nil {
			return nil, fmt.Errorf("starting %d standalone servers: %w", count, err)
		}
		defer func() { err = errors.Join(err, shards.stop()) }()
		logger.Printf("%d standalone server%s for sharded on core %q", count, plural(count), cfg.core)
	}
	for run := 0; run < cfg.runs; run++ {
		for _, d := range cfg.designs {
			target := standalone
			switch {
			case d.sharded:
				target = shards
			case d.onCluster:
				target = c
			}
			if err := target.flush(ctx); err != nil {
				return nil, fmt.Errorf("%s: flushing: %w", d.name, stopped(ctx, err))
			}
			r, err := measure(ctx, target, d, data, cfg, logger)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", d.name, stopped(ctx, err))
			}
			logger.Printf("masters %d run %d %-21s %8.0f decisions/s  %5.1f µs Redis CPU/decision  shares %s  p50 %s p99 %s  (Redis core %.0f%% busy)",
				count, run+1, d.name, r.rate, r.cpuMicros, shares(r.perNode), r.p50, r.p99, 100*r.redisBusy)
			t.results[d.name] = append(t.results[d.name], r)
		}
	}
	return t, nil
}
