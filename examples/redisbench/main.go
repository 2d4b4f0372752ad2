// Command redisbench measures the Redis store against the common design it
// replaces, called zset4 here (one sorted set per rule and recipient, four
// EVALSHA in sequence, as the push platform this project started from did:
// "seed 002" in the code), side by side in one run:
// decisions per second on one Redis core, Redis CPU per decision and Redis
// memory per recipient.
//
// The data set: N recipients with 20 sends each spread over 24 h and 5
// content hashes each, decided in time order with the seed config (4 rules)
// by 32 concurrent callers. Each design gets a fresh redis-server pinned to
// core 0 (taskset); run this program on the other core:
//
//	go build -o /tmp/redisbench ./examples/redisbench
//	taskset -c 1 /tmp/redisbench -recipients 200000 -runs 3
//
// The freqcap-batch designs send the same data set as batch sends of
// -batch consecutive sends (500 by default, from -batch-callers senders,
// 4 by default), so a batch entry and a single send are measured alike:
//
//	taskset -c 1 /tmp/redisbench -designs freqcap,freqcap-batch
//
// -gateways N spreads the batches over N stores on the one Redis, as N
// gateways behind a load balancer, whose batches conflict on the
// recipients they share. floor-batch reads and writes back each batch's
// keys with no decision: the least a read-then-write design costs.
//
// Redis CPU per decision is the used_cpu_user+used_cpu_sys delta over the
// load divided by the decisions; memory per recipient is the used_memory
// delta divided by the recipients. Client CPU per decision is this
// process's user+sys time over the same load divided by the decisions: the
// gateway's store client, go-redis included (see clientcpu.go). The
// designs requests and requests-batch build the requests with no store,
// so that the store's share can be told apart; -commandstats splits
// Redis's CPU by command and counts the client's round trips.
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
	"runtime/pprof"
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
	recipients := flag.Int("recipients", 200_000, "recipients in the data set")
	sends := flag.Int("sends", 20, "sends per recipient, spread over 24 h")
	callers := flag.Int("callers", 32, "concurrent callers")
	runs := flag.Int("runs", 3, "runs of each design, alternated; medians are reported")
	designs := flag.String("designs", "zset4,freqcap", "designs to compare, comma-separated: zset4, zset4-pipelined, freqcap (decided in Go, a lone decision at low load in the script), freqcap-go (every batch in Go), freqcap-commit (freqcap, every write by commit.lua even where the server has SET IFEQ), freqcap-script (decided in freqcap.lua), freqcap-unbatched (in the script, one decision a run), freqcap-batch (batch sends of -batch entries, decided in Go), freqcap-batch-commit (freqcap-batch written by commit.lua even where the server has SET IFEQ), freqcap-batch-nocheck (freqcap-batch with the check of its native writes stripped: the floor at the store's pace, for measuring only), freqcap-batch-script (batch sends decided in freqcap.lua, as script_only), requests (single sends' requests built, no store: the client CPU that is not the store's), requests-batch (the same for batch sends), floor-batch (batch sends read and written back with no decision: the least a read-then-write design costs), floor-batch-paced (floor-batch held to the pace of the freqcap-batch design before it in the run, or to -pace)")
	pace := flag.Float64("pace", 0, "floor-batch-paced: sends a second (0: the rate the freqcap-batch design measured just before it in the same run)")
	batch := flag.Int("batch", 500, "freqcap-batch: entries in a batch send (consecutive sends of the data set)")
	batchCallers := flag.Int("batch-callers", 4, "freqcap-batch: concurrent batch senders")
	gateways := flag.Int("gateways", 1, "freqcap-batch: stores (gateways) the batches are spread over in turn, as by a load balancer")
	core := flag.String("redis-core", "0", "CPU list to pin redis-server to (taskset -c); empty: no pinning")
	inFlight := flag.Int("inflight", 0, "freqcap: batched script runs in flight (0: the store's default)")
	cpuProfile := flag.String("cpuprofile", "", "write this process's CPU profile (the client side) to the file")
	allocProfile := flag.String("allocprofile", "", "write this process's allocations (go tool pprof -sample_index=alloc_objects) to the file at the end")
	roundTripsOnly := flag.Bool("roundtrips", false, "print what one round trip costs Redis, by what it carries, and exit")
	primitivesOnly := flag.Bool("primitives", false, "print what each way of reading, checking and writing a batch's keys costs Redis a key (-recipients keys, -batch a batch, -runs rounds), and exit")
	addr := flag.String("addr", "", "use this Redis (flushed before each design) instead of starting one, e.g. under valgrind --tool=callgrind")
	flag.BoolVar(&commandStats, "commandstats", false, "after each design's run, print Redis's CPU a decision by command (INFO commandstats) against used_cpu, and the client's round trips and batch sizes")
	flag.StringVar(&serverBin, "server", serverBin, "the server binary started for each design (default: $FREQCAP_REDIS_SERVER, else redis-server), e.g. a valkey-server")
	flag.Parse()
	if *addr == "" {
		log.Printf("server: %s", serverVersion())
	}

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		pprof.StartCPUProfile(f)
		defer pprof.StopCPUProfile()
	}
	if *allocProfile != "" {
		defer func() {
			f, err := os.Create(*allocProfile)
			if err == nil {
				err = pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
			if err != nil {
				log.Print(err)
			}
		}()
	}
	if *roundTripsOnly {
		if err := roundTrips(*core); err != nil {
			log.Fatal(err)
		}
		return
	}
	if *primitivesOnly {
		if err := measurePrimitives(*core, *addr, *recipients, *batch, *runs); err != nil {
			log.Fatal(err)
		}
		return
	}
	data := makeData(*recipients, *sends, 5)
	log.Printf("data set: %d recipients × %d sends over 24 h, 5 contents each: %d decisions", *recipients, *sends, len(data))
	results := map[string][]result{}
	names := strings.Split(*designs, ",")
	for run := 0; run < *runs; run++ {
		currentRun = run + 1
		var batchRate float64 // the rate of this run's last freqcap-batch design
		for _, name := range names {
			var r result
			var err error
			switch {
			case name == "floor-batch":
				r, err = measureFloor(name, data, *recipients, *batch, *batchCallers, *core, *addr, 0)
			case name == "floor-batch-paced":
				p := *pace
				if p <= 0 {
					p = batchRate
				}
				if p <= 0 {
					log.Fatal("floor-batch-paced needs a freqcap-batch design before it in -designs, or -pace")
				}
				r, err = measureFloor(name, data, *recipients, *batch, *batchCallers, *core, *addr, p)
			case strings.HasPrefix(name, "freqcap-batch"), name == "requests-batch":
				r, err = measureBatches(name, data, *recipients, *batch, *batchCallers, *gateways, *core, *addr)
			default:
				r, err = measure(name, data, *recipients, *callers, *core, *addr, *inFlight)
			}
			if err != nil {
				log.Panicf("%s: %v", name, err)
			}
			log.Printf("run %d %-18s %9.0f decisions/s  %6.1f µs Redis CPU/decision  %5.0f bytes/recipient  (%d admitted)  %6.2f µs client CPU/decision  %5.1f client allocs/decision",
				run+1, name, r.rate, r.cpuMicros, r.bytesPerRecipient, r.admitted, r.clientMicros, r.clientAllocs)
			results[name] = append(results[name], r)
			if strings.HasPrefix(name, "freqcap-batch") {
				batchRate = r.rate
			}
		}
	}
	fmt.Printf("\n| design | decisions/s per Redis core | Redis CPU µs per decision | Redis bytes per recipient | client CPU µs per decision |\n|---|---|---|---|---|\n")
	for _, name := range names {
		m := medians(results[name])
		fmt.Printf("| %s | %.0f | %.1f | %.0f | %.2f |\n", name, m.rate, m.cpuMicros, m.bytesPerRecipient, m.clientMicros)
	}
	if len(names) > 1 {
		a, b := medians(results[names[0]]), medians(results[names[len(names)-1]])
		fmt.Printf("\n%s / %s: %.2f× decisions/s, %.2f× less Redis CPU per decision, %.2f× less memory\n",
			names[len(names)-1], names[0], b.rate/a.rate, a.cpuMicros/b.cpuMicros, a.bytesPerRecipient/b.bytesPerRecipient)
	}
}

// send is one message of the data set, at ms since the start of the day.
type send struct {
	recipient int32
	content   int8
	at        int32
}

func makeData(recipients, sends, contents int) []send {
	rng := rand.New(rand.NewSource(1))
	out := make([]send, 0, recipients*sends)
	for r := 0; r < recipients; r++ {
		for i := 0; i < sends; i++ {
			out = append(out, send{recipient: int32(r), content: int8(rng.Intn(contents)), at: int32(rng.Intn(86_400_000))})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].at < out[j].at })
	return out
}

type result struct {
	rate, cpuMicros, bytesPerRecipient float64
	// clientMicros is this process's CPU a decision (see clientcpu.go),
	// clientAllocs its heap allocations a decision.
	clientMicros, clientAllocs float64
	admitted                   int64
}

func medians(rs []result) result {
	med := func(f func(result) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		sort.Float64s(v)
		return v[len(v)/2]
	}
	return result{
		rate:              med(func(r result) float64 { return r.rate }),
		cpuMicros:         med(func(r result) float64 { return r.cpuMicros }),
		bytesPerRecipient: med(func(r result) float64 { return r.bytesPerRecipient }),
		clientMicros:      med(func(r result) float64 { return r.clientMicros }),
	}
}

// decider is one design: decide one send at a simulated time.
type decider func(ctx context.Context, s send, now time.Time) (bool, error)

// replayer decides every send of the data set, the simulated day starting
// at day, and returns how many were admitted.
type replayer func(ctx context.Context, data []send, day time.Time) (int64, error)

// simulated is a send's time: whole seconds of simulated time, so that
// concurrent decisions share a clock reading as they do on TIME.
func simulated(day time.Time, s send) time.Time {
	return day.Add(time.Duration(s.at) * time.Millisecond).Truncate(time.Second)
}

// measure replays the data set on design, one send a decision from
// callers concurrent callers.
func measure(design string, data []send, recipients, callers int, core, addr string, inFlight int) (result, error) {
	return measureWith(design, data, recipients, callers, core, addr, func(client *redis.Client) (decider, replayer, func(), error) {
		decide, closer, err := newDecider(design, client, inFlight)
		return decide, oneByOne(decide, callers), closer, err
	})
}

// measureBatches replays the data set as batch sends of size consecutive
// sends each (decided in Go, or in freqcap.lua for freqcap-batch-script),
// spread over gateways stores in turn,
// from callers concurrent senders; a denied entry is dropped, the rest
// recorded, as under "batch drop".
func measureBatches(design string, data []send, recipients, size, callers, gateways int, core, addr string) (result, error) {
	return measureWith(design, data, recipients, callers, core, addr, func(client *redis.Client) (decider, replayer, func(), error) {
		if design == "freqcap-batch-nocheck" {
			client.AddHook(noCheck{})
		}
		built := design == "requests-batch" // the requests alone, no store
		stores := make([]*redisstore.Store, max(gateways, 1))
		if built {
			stores = nil
		}
		for i := range stores {
			stores[i] = redisstore.New(client, redisstore.Options{Timeout: 10 * time.Second, ScriptOnly: design == "freqcap-batch-script", NoNativeWrite: design == "freqcap-batch-commit"})
		}
		var turn atomic.Int64
		rules := seedRules()
		fill := func(req *limiter.Request, s send, now time.Time) {
			req.Now, req.Checks = now, seedChecks(req.Checks[:0], rules, s)
		}
		decideBatch := func(ctx context.Context, reqs []limiter.Request) (int64, error) {
			if built {
				return int64(len(reqs)), nil
			}
			store := stores[int(turn.Add(1))%len(stores)]
			ds, err := store.DecideBatch(ctx, reqs, limiter.BatchEach)
			if err != nil {
				return 0, err
			}
			var admitted int64
			for _, d := range ds {
				if d.Allowed {
					admitted++
				}
			}
			return admitted, nil
		}
		warm := func(ctx context.Context, s send, now time.Time) (bool, error) {
			reqs := make([]limiter.Request, 1)
			fill(&reqs[0], s, now)
			n, err := decideBatch(ctx, reqs)
			return n == 1, err
		}
		replay := func(ctx context.Context, data []send, day time.Time) (int64, error) {
			return inParallel(callers, func(next func(n int) (int64, int64), admit func(int64)) error {
				reqs := make([]limiter.Request, size)
				for {
					from, to := next(size)
					if from >= to {
						return nil
					}
					batch := reqs[:to-from]
					for i := range batch {
						s := data[from+int64(i)]
						fill(&batch[i], s, simulated(day, s))
					}
					n, err := decideBatch(ctx, batch)
					if err != nil {
						return err
					}
					admit(n)
				}
			}, int64(len(data)))
		}
		return warm, replay, func() {
			for _, store := range stores {
				closeStore(design, store)
			}
		}, nil
	})
}

// oneByOne replays the data set one send a decision from callers
// concurrent callers.
func oneByOne(decide decider, callers int) replayer {
	return func(ctx context.Context, data []send, day time.Time) (int64, error) {
		return inParallel(callers, func(next func(n int) (int64, int64), admit func(int64)) error {
			for {
				from, to := next(1)
				if from >= to {
					return nil
				}
				s := data[from]
				ok, err := decide(ctx, s, simulated(day, s))
				if err != nil {
					return err
				}
				if ok {
					admit(1)
				}
			}
		}, int64(len(data)))
	}
}

// inParallel runs work on callers goroutines sharing the sends 0..total-1
// in order: next(n) takes the next n (fewer at the end, none when from ==
// to), admit counts admissions. It returns the admissions and the first
// error.
func inParallel(callers int, work func(next func(n int) (int64, int64), admit func(int64)) error, total int64) (int64, error) {
	var taken, admitted atomic.Int64
	next := func(n int) (int64, int64) {
		to := taken.Add(int64(n))
		return min(to-int64(n), total), min(to, total)
	}
	admit := func(n int64) { admitted.Add(n) }
	var firstErr atomic.Value
	var wg sync.WaitGroup
	for c := 0; c < callers; c++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := work(next, admit); err != nil {
				firstErr.CompareAndSwap(nil, err)
			}
		}()
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return 0, err
	}
	return admitted.Load(), nil
}

// measureWith starts a fresh Redis (or flushes addr), prepares a design on
// it, replays the data set, and reads Redis's CPU and memory around it.
func measureWith(design string, data []send, recipients, callers int, core, addr string, prepare func(*redis.Client) (decider, replayer, func(), error)) (result, error) {
	if addr == "" {
		srv, err := startRedis(core)
		if err != nil {
			return result{}, err
		}
		defer srv.stop()
		addr = srv.addr
	}
	client := redis.NewClient(&redis.Options{Addr: addr, PoolSize: callers + 8, ContextTimeoutEnabled: true})
	defer client.Close()
	var sent *sentCounter
	if commandStats {
		sent = newSentCounter()
		client.AddHook(sent)
	}
	ctx := context.Background()
	if err := client.FlushAll(ctx).Err(); err != nil {
		return result{}, err
	}
	warm, replay, closer, err := prepare(client)
	if err != nil {
		return result{}, err
	}
	defer closer()
	// Warm the script cache, then read the baseline. (zset4's sets of
	// this send, in 2023, expire as they are written.)
	if _, err := warm(ctx, send{recipient: -1}, time.Unix(1_700_000_000, 0)); err != nil {
		return result{}, err
	}
	client.Del(ctx, "freqcap:recipient{u-1}")
	mem0, cpu0, err := stats(ctx, client)
	if err != nil {
		return result{}, err
	}
	var st0 serverStats
	if commandStats {
		if st0, err = readServerStats(ctx, client); err != nil {
			return result{}, err
		}
		sent.reset()
	}
	// The simulated day ends now. The store's keys expire relative to
	// their simulated time (SET PX), so none expires before the end;
	// zset4 moves its expiries past the run (zsetExpiryShift).
	day := time.Now().Add(-24 * time.Hour).Truncate(time.Second)
	mallocs := heapAllocs()
	start, clientCPU := time.Now(), processCPU()
	admitted, err := replay(ctx, data, day)
	elapsed, clientCPU := time.Since(start), processCPU()-clientCPU
	mallocs = heapAllocs() - mallocs
	if err != nil {
		return result{}, err
	}
	_, cpu1, err := stats(ctx, client)
	if err != nil {
		return result{}, err
	}
	if commandStats {
		st1, err := readServerStats(ctx, client)
		if err != nil {
			return result{}, err
		}
		printCommandStats(design, currentRun, float64(len(data)), st0, st1, (cpu1-cpu0)*1e6/float64(len(data)), sent)
	}
	if strings.HasPrefix(design, "zset4") {
		if err := zsetExpire(ctx, client, day.Add(24*time.Hour)); err != nil {
			return result{}, err
		}
	}
	// Expired keys count in used_memory until touched: touch them all.
	var cursor uint64
	for {
		keys, next, err := client.Scan(ctx, cursor, "*", 10_000).Result()
		if err != nil {
			return result{}, err
		}
		if len(keys) > 0 {
			client.Exists(ctx, keys...)
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	mem1, _, err := stats(ctx, client)
	if err != nil {
		return result{}, err
	}
	n := float64(len(data))
	return result{
		rate:              n / elapsed.Seconds(),
		cpuMicros:         (cpu1 - cpu0) * 1e6 / n,
		bytesPerRecipient: float64(mem1-mem0) / float64(recipients),
		clientMicros:      float64(clientCPU.Microseconds()) / n,
		clientAllocs:      float64(mallocs) / n,
		admitted:          admitted,
	}, nil
}

// commandStats is -commandstats; currentRun the run being measured, for
// its output.
var (
	commandStats bool
	currentRun   int
)

func seedRules() []*limiter.Rule {
	return []*limiter.Rule{
		{Name: "recipient_minute", By: []string{"recipient"}, Limit: 15, Window: limiter.Window{Duration: time.Minute}},
		{Name: "recipient_day", By: []string{"recipient"}, Limit: 50, Window: limiter.Window{Duration: 24 * time.Hour}},
		{Name: "same_content_59s", By: []string{"recipient", "content"}, Limit: 2, Window: limiter.Window{Duration: 59 * time.Second}},
		{Name: "same_content_59m", By: []string{"recipient", "content"}, Limit: 5, Window: limiter.Window{Duration: 59 * time.Minute}},
	}
}

// seedChecks appends the checks of one send under seedRules to dst.
func seedChecks(dst []limiter.Check, rules []*limiter.Rule, s send) []limiter.Check {
	who, what := "u"+strconv.Itoa(int(s.recipient)), contentHash(s.content)
	return append(dst,
		limiter.Check{Rule: rules[0], Values: []string{who}, Cost: 1},
		limiter.Check{Rule: rules[1], Values: []string{who}, Cost: 1},
		limiter.Check{Rule: rules[2], Values: []string{who, what}, Cost: 1},
		limiter.Check{Rule: rules[3], Values: []string{who, what}, Cost: 1})
}

// contentHash stands for the hash of a message text, as senders key
// content caps by. A gateway reads it from the body; it is made once here,
// so that the client CPU measured is not fmt's.
func contentHash(c int8) string { return contentHashes[uint8(c)] }

var contentHashes = func() (h [256]string) {
	for i := range h {
		h[i] = fmt.Sprintf("%016x", uint64(int8(i)+1)*0x9E3779B97F4A7C15)
	}
	return h
}()

func newDecider(design string, client *redis.Client, inFlight int) (decider, func(), error) {
	switch design {
	case "freqcap", "freqcap-go", "freqcap-commit", "freqcap-script", "freqcap-unbatched":
		opts := redisstore.Options{Timeout: 10 * time.Second, InFlight: inFlight}
		switch design {
		case "freqcap-go":
			opts.GoBatchMin = 1
		case "freqcap-commit":
			opts.NoNativeWrite = true
		case "freqcap-script":
			opts.ScriptOnly = true
		case "freqcap-unbatched":
			opts.ScriptOnly, opts.InFlight, opts.MaxBatch = true, 64, 1
		}
		store := redisstore.New(client, opts)
		rules := seedRules()
		closer := func() { closeStore(design, store) }
		return func(ctx context.Context, s send, now time.Time) (bool, error) {
			d, err := store.Decide(ctx, &limiter.Request{Now: now, Checks: seedChecks(nil, rules, s)})
			if err != nil {
				return false, err
			}
			return d.Allowed, nil
		}, closer, nil
	case "requests":
		return requestsDecider(), func() {}, nil
	case "zset4", "zset4-pipelined":
		// A pipeline sends EVALSHA without falling back to EVAL.
		if err := zsetScript.Load(context.Background(), client).Err(); err != nil {
			return nil, nil, err
		}
		return zsetDecider(client, design == "zset4-pipelined"), func() {}, nil
	}
	return nil, nil, fmt.Errorf("unknown design %q", design)
}

// closeStore closes a design's store and says how many of its batches went
// to the script for a key changed between their read and their write.
func closeStore(design string, store *redisstore.Store) {
	store.Close()
	for _, p := range store.WritePaths() {
		log.Printf("%s: writes from Go on %s: %s (%s)", design, p.Node, p.Path, p.Reason)
	}
	if n := store.Conflicts(); n > 0 {
		log.Printf("%s: %d batches found a key changed at their write and went to the script", design, n)
	}
}

type redisServer struct {
	addr string
	cmd  *exec.Cmd
	dir  string
}

func startRedis(core string) (*redisServer, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	dir, err := os.MkdirTemp("", "redisbench")
	if err != nil {
		return nil, err
	}
	args := []string{"--port", strconv.Itoa(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir}
	var cmd *exec.Cmd
	if core != "" {
		cmd = exec.Command("taskset", append([]string{"-c", core, serverBin}, args...)...)
	} else {
		cmd = exec.Command(serverBin, args...)
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &redisServer{addr: fmt.Sprintf("127.0.0.1:%d", port), cmd: cmd, dir: dir}
	c := redis.NewClient(&redis.Options{Addr: s.addr})
	defer c.Close()
	for i := 0; i < 100; i++ {
		if c.Ping(context.Background()).Err() == nil {
			return s, nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.stop()
	return nil, fmt.Errorf("redis-server did not start on %s", s.addr)
}

func (s *redisServer) stop() {
	s.cmd.Process.Kill()
	s.cmd.Wait()
	os.RemoveAll(s.dir)
}

// stats reads used_memory (bytes) and the server's CPU seconds.
func stats(ctx context.Context, c *redis.Client) (int64, float64, error) {
	info, err := c.Info(ctx, "memory", "cpu").Result()
	if err != nil {
		return 0, 0, err
	}
	var mem int64
	var cpu float64
	for _, line := range strings.Split(info, "\r\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		switch k {
		case "used_memory":
			mem, _ = strconv.ParseInt(v, 10, 64)
		case "used_cpu_user", "used_cpu_sys":
			f, _ := strconv.ParseFloat(v, 64)
			cpu += f
		}
	}
	return mem, cpu, nil
}
