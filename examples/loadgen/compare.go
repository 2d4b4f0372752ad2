package main

import (
	"cmp"
	"fmt"
	"log"
	"net/http"
	"strings"
	"time"
)

// side is one of the two Caddys of a comparison and what was measured of
// it, a value per slice (so per round), in round order.
type side struct {
	name    string // A or B
	caddy   *caddyProc
	pids    []int // whose CPU time a request is charged: Caddy, and its Redis
	client  *http.Client
	rates   []float64 // req/s at full load
	cpus    []float64 // µs of CPU a request at full load
	rcpus   []float64 // Redis's share of cpus
	p99s    []float64 // ms, at the comparison's latencyRate
	latCPUs []float64 // µs of CPU a request at latencyRate
	latRCPU []float64 // Redis's share of latCPUs
	p99sOwn []float64 // B's, ms, at ownRate
	denied  int       // 429s, in all slices
	alloc   allocated // Caddy's, over the full-load slices
	served  int       // requests, over the full-load slices
}

// allocPerRequest is what Caddy allocated a request at full load: bytes,
// objects, and garbage collections a thousand requests.
func (s *side) allocPerRequest() (kb, objects, gcs float64) {
	n := float64(max(s.served, 1))
	return s.alloc.bytes / n / 1024, s.alloc.objects / n, s.alloc.gcs / n * 1000
}

// perRequest is d spread over n requests, in µs.
func perRequest(d time.Duration, n int) float64 { return d.Seconds() * 1e6 / float64(max(n, 1)) }

// p99 is the 99th percentile of lat in ms; it sorts lat.
func p99(lat []time.Duration) float64 {
	if len(lat) == 0 {
		return 0
	}
	return float64(quantile(lat, 0.99)) / float64(time.Millisecond)
}

// slowest is the longest of lat in ms.
func slowest(lat []time.Duration) float64 {
	var m time.Duration
	for _, l := range lat {
		m = max(m, l)
	}
	return float64(m) / float64(time.Millisecond)
}

// comparison is A (reverse_proxy only) and B (with frequency_cap on one
// store), both running, loaded one at a time. With a baseline build, A is
// that build with the same cap on a store of its own, alike.
type comparison struct {
	store       string
	redis       *redisProc // B's
	redisA      *redisProc // A's, with a baseline build
	a, b        *side
	latencyRate float64 // a share of A's maximum, for both
	ownRate     float64 // the same share of B's maximum, for B
}

func newComparison(bin, baseline, spec string) (*comparison, error) {
	store, redisCPUs, pinnedRedis := strings.Cut(spec, "@")
	c := &comparison{store: spec}
	switch store {
	case "none": // B is A again: the spread of the instrument itself
	case "memory":
	case "skip": // B reads the body and decides nothing: the handler without a store
	case "redis", "redis-rt":
		if !pinnedRedis {
			redisCPUs = ""
		}
		var err error
		if c.redis, err = startRedis(redisCPUs, store == "redis-rt"); err != nil {
			return nil, err
		}
		if baseline != "" {
			// Its own Redis, so that neither build counts the other's
			// sends or conflicts with its writes.
			if c.redisA, err = startRedis(redisCPUs, store == "redis-rt"); err != nil {
				c.stop()
				return nil, err
			}
		}
		// To Caddy a Redis at real-time priority is a Redis like any other.
		store = "redis"
	default:
		return nil, fmt.Errorf("unknown store %q: none, skip, memory, redis[@<cpus>] or redis-rt[@<cpus>]", spec)
	}
	label := strings.ReplaceAll(spec, "@", "-")
	aBin, aCapped, aRedis := bin, false, (*redisProc)(nil)
	if baseline != "" {
		aBin, aCapped, aRedis = baseline, store != "none", c.redisA
	}
	a, err := startSide("A", aBin, aCapped, store, aRedis, label)
	if err != nil {
		c.stop()
		return nil, err
	}
	c.a = a
	if c.b, err = startSide("B", bin, store != "none", store, c.redis, label); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

// startSide starts one side's Caddy, on redis when it is not nil; its CPU
// is Caddy's and its Redis's.
func startSide(name, bin string, capped bool, store string, redis *redisProc, label string) (*side, error) {
	redisAddr := ""
	if redis != nil {
		redisAddr = redis.addr
	}
	p, err := startCaddy(bin, name, capped, store, redisAddr, label)
	if err != nil {
		return nil, err
	}
	s := &side{name: name, caddy: p, pids: []int{p.cmd.Process.Pid}, client: newClient()}
	if redis != nil {
		s.pids = append(s.pids, redis.cmd.Process.Pid)
	}
	return s, nil
}

func newClient() *http.Client {
	return &http.Client{Timeout: clientTimeout, Transport: &http.Transport{MaxIdleConnsPerHost: 256, MaxConnsPerHost: 256}}
}

func (c *comparison) stop() {
	for _, s := range []*side{c.a, c.b} {
		if s != nil {
			s.caddy.stop()
		}
	}
	for _, r := range []*redisProc{c.redis, c.redisA} {
		if r != nil {
			r.stop()
		}
	}
}

// order is the sides in round r: A B, then B A, so that a drift in the
// machine's speed over a pair of rounds falls on both alike.
func (c *comparison) order(r int) []*side {
	if r%2 == 0 {
		return []*side{c.a, c.b}
	}
	return []*side{c.b, c.a}
}

// paired is the median over rounds of f of B's and A's values in the same
// round, with its 95 % confidence interval: what the round-to-round changes
// of the machine's speed cancel out of.
func paired(b, a []float64, f func(b, a float64) float64) estimate {
	var v []float64
	for i := range min(len(a), len(b)) {
		v = append(v, f(b[i], a[i]))
	}
	return medianCI(v)
}

func ratio(b, a float64) float64 { return b / a }
func diff(b, a float64) float64  { return b - a }

// run warms both up, then measures the maximum throughput, and the latency
// of both at loadShare of A's maximum and of B at loadShare of its own, in
// rounds of one slice each (throughput in rounds, latency in latencyRounds).
func (c *comparison) run(bodies *bodySource, conc int, length time.Duration, rounds, latencyRounds int, loadShare float64) error {
	for _, s := range []*side{c.a, c.b} { // connections, code paths, the store
		if sl := closedLoop(s.client, s.caddy.url, bodies, conc, length); sl.failed > 0 {
			return fmt.Errorf("%s: %d requests failed warming up", s.name, sl.failed)
		}
	}
	if err := c.throughput(bodies, conc, length, rounds); err != nil {
		return err
	}
	c.latencyRate = loadShare * median(c.a.rates)
	c.ownRate = loadShare * median(c.b.rates)
	return c.latency(bodies, conc, length, latencyRounds)
}

// throughput loads each side closed loop, with the CPU profiles taken
// over all its slices when asked for.
func (c *comparison) throughput(bodies *bodySource, conc int, length time.Duration, rounds int) error {
	profiled := c.profile(time.Duration(rounds)*2*length, "")
	for r := range rounds {
		for _, s := range c.order(r) {
			alloc0, err := s.caddy.allocatedSoFar()
			if err != nil {
				return err
			}
			cpu0, rcpu0 := cpuTime(s.pids), cpuTime(s.pids[1:])
			sl := closedLoop(s.client, s.caddy.url, bodies, conc, length)
			cpu, rcpu := cpuTime(s.pids)-cpu0, cpuTime(s.pids[1:])-rcpu0
			if sl.failed > 0 {
				return fmt.Errorf("%s: %d requests failed at full load", s.name, sl.failed)
			}
			alloc1, err := s.caddy.allocatedSoFar()
			if err != nil {
				return err
			}
			s.alloc, s.served = s.alloc.plus(alloc1.minus(alloc0)), s.served+len(sl.lat) // lat holds the 429s too
			s.cpus = append(s.cpus, perRequest(cpu, len(sl.lat)))
			s.rcpus = append(s.rcpus, perRequest(rcpu, len(sl.lat)))
			s.denied += sl.denied
			s.rates = append(s.rates, float64(len(sl.lat))/sl.took.Seconds())
		}
		log.Printf("%s round %d: A %.0f req/s, B %.0f req/s", c.store, r+1, c.a.rates[r], c.b.rates[r])
	}
	return profiled()
}

// profile takes each side's CPU profile over the next d, when asked for,
// into <cpuProfile>.<store>-<side><suffix>; the function it returns waits
// for both.
func (c *comparison) profile(d time.Duration, suffix string) (wait func() error) {
	profiled := make(chan error, 2)
	for _, s := range []*side{c.a, c.b} {
		if cpuProfile == "" {
			profiled <- nil
			continue
		}
		file := fmt.Sprintf("%s.%s-%s%s", cpuProfile, s.caddy.label, s.name, suffix)
		go func() { profiled <- s.caddy.profile(d, file) }()
	}
	return func() error {
		var err error
		for range 2 {
			err = cmp.Or(err, <-profiled)
		}
		return err
	}
}

// latency loads each side open loop at c.latencyRate, and B also at
// c.ownRate: at one offered load B's core is the busier by what the cap
// costs, at the same share of its own maximum both are equally busy. B's
// slice at its own rate moves through the round, so that no slice always
// follows the same one.
func (c *comparison) latency(bodies *bodySource, conc int, length time.Duration, rounds int) error {
	type job struct {
		s     *side
		rate  float64
		into  *[]float64
		cpus  *[]float64 // where its CPU a request goes; nil: nowhere
		rcpus *[]float64 // and Redis's share of it
		label string     // of its trace file
	}
	all := []job{{c.a, c.latencyRate, &c.a.p99s, &c.a.latCPUs, &c.a.latRCPU, "A"}, {c.b, c.latencyRate, &c.b.p99s, &c.b.latCPUs, &c.b.latRCPU, "B"}, {c.b, c.ownRate, &c.b.p99sOwn, nil, nil, "B-own"}}
	if execTrace != "" {
		// A round of its own, left out of the figures: tracing slows
		// what it traces.
		for _, j := range all {
			traced := make(chan error, 1)
			go func() {
				traced <- j.s.caddy.trace(length, fmt.Sprintf("%s.%s-%s", execTrace, j.s.caddy.label, j.label))
			}()
			openLoop(j.s.caddy.addr, sendPath, bodies, conc, length, j.rate)
			if err := <-traced; err != nil {
				return err
			}
		}
	}
	tail := map[*[]float64]string{}
	profiled := c.profile(time.Duration(rounds)*3*length, "-latency")
	for r := range rounds {
		jobs := append([]job(nil), all...)
		if r%2 == 1 {
			jobs[0], jobs[1] = jobs[1], jobs[0]
		}
		k := r % 3
		jobs = append(jobs[k:], jobs[:k]...)
		for _, j := range jobs {
			if !(j.rate > 0) {
				return fmt.Errorf("%s: no rate to measure latency at (its maximum was 0 req/s)", j.s.name)
			}
			cpu0, rcpu0 := cpuTime(j.s.pids), cpuTime(j.s.pids[1:])
			sl := openLoop(j.s.caddy.addr, sendPath, bodies, conc, length, j.rate)
			cpu, rcpu := perRequest(cpuTime(j.s.pids)-cpu0, len(sl.lat)), perRequest(cpuTime(j.s.pids[1:])-rcpu0, len(sl.lat))
			if sl.failed > 0 {
				return fmt.Errorf("%s: %d requests failed at %.0f req/s", j.s.name, sl.failed, j.rate)
			}
			j.s.denied += sl.denied
			p := p99(sl.lat)
			*j.into = append(*j.into, p)
			if j.cpus != nil {
				*j.cpus, *j.rcpus = append(*j.cpus, cpu), append(*j.rcpus, rcpu)
			}
			tail[j.into] = fmt.Sprintf("p99 %.2f ms, slowest %.2f ms, CPU %.0f µs a request (sent late: p99 %.0f µs)", p, slowest(sl.lat), cpu, perRequest(sl.lateP99, 1))
		}
		log.Printf("%s round %d at %.0f req/s: A %s; B %s; B at %.0f req/s %s", c.store, r+1,
			c.latencyRate, tail[&c.a.p99s], tail[&c.b.p99s], c.ownRate, tail[&c.b.p99sOwn])
	}
	return profiled()
}
