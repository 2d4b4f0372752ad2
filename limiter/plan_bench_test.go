package limiter_test

import (
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"
)

// freshKeys is a KeySource where every key is new: a decision looks up
// nothing and records into one reused key, so that the benchmarks measure
// the plan's own work, not a store's.
type freshKeys struct{ k recordlog.KeyLogs }

func (f *freshKeys) Lookup(*limiter.Plan, int, int64) *recordlog.KeyLogs { return nil }

func (f *freshKeys) Create(*limiter.Plan, int) *recordlog.KeyLogs {
	f.k.Subs = f.k.Subs[:0]
	return &f.k
}

// seedRequests are requests of the seed config to n recipients, each with a
// content hash, as redisbench sends them.
func seedRequests(n int) []limiter.Request {
	rules := limitertest.SeedRules()
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	reqs := make([]limiter.Request, n)
	for i := range reqs {
		who, what := "u"+strconv.Itoa(i), strconv.FormatUint(uint64(i%5+1)*0x9E3779B97F4A7C15, 16)
		reqs[i] = *limitertest.Req(now, limitertest.Vals{"recipient": who, "content": what}, rules...)
	}
	return reqs
}

// BenchmarkPlanBuild is what every store does first with a request of the
// seed config: its checks grouped into sections, keys and sub-log ids
// built and escaped, on a pooled plan.
func BenchmarkPlanBuild(b *testing.B) {
	reqs := seedRequests(1024)
	p := limiter.GetPlan()
	b.ReportAllocs()
	defer threadCPU(b)()
	i := 0
	for b.Loop() {
		req := &reqs[i%len(reqs)]
		i++
		if err := p.Build("freqcap:", req, req.Now); err != nil {
			b.Fatal(err)
		}
		p.Reset()
	}
}

// BenchmarkPlanDecideFinish is a plan's whole part of one decision of the
// seed config, apart from the store's keys: Build, DecideOn over new keys
// (four rules evaluated, two logs recorded) and Finish (the Decision and
// its admission id).
func BenchmarkPlanDecideFinish(b *testing.B) {
	reqs := seedRequests(1024)
	p := limiter.GetPlan()
	src := &freshKeys{}
	b.ReportAllocs()
	defer threadCPU(b)()
	i := 0
	for b.Loop() {
		req := &reqs[i%len(reqs)]
		i++
		if err := p.Build("freqcap:", req, req.Now); err != nil {
			b.Fatal(err)
		}
		now := req.Now.UnixMilli()
		admitted, err := limiter.DecideOn(src, p, now, true)
		if err != nil || !admitted {
			b.Fatalf("admitted %v: %v", admitted, err)
		}
		if d := p.Finish(req, now, admitted); !d.Allowed {
			b.Fatal("denied")
		}
		p.Reset()
	}
}

// threadCPU reports, when the returned function is called, the CPU time of
// the benchmark's thread an op (cpu-ns/op) beside the wall-clock ns/op:
// on a shared machine, time spent waiting for the core does not count.
func threadCPU(b *testing.B) func() {
	runtime.LockOSThread()
	const rusageThread = 1 // RUSAGE_THREAD
	cpu := func() time.Duration {
		var ru syscall.Rusage
		if err := syscall.Getrusage(rusageThread, &ru); err != nil {
			b.Fatal(err)
		}
		return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	}
	start := cpu()
	return func() {
		b.ReportMetric(float64((cpu()-start).Nanoseconds())/float64(b.N), "cpu-ns/op")
		runtime.UnlockOSThread()
	}
}
