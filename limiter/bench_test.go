package limiter

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// seedStream is the benchmark data set as a stream of requests:
// recipients each sent to every 72 minutes (20 a day), through 5 contents
// in turn, in time order on a simulated clock. So the seed config admits
// every decision, as a gateway's traffic mostly is, and each admission
// writes its logs and gets an admission id: the dearer path. (Requests on
// the wall clock, as this benchmark first sent them, reached the same
// recipient with the same content about 16 times a second: after two, the
// 59 s rule denied the rest, and it measured denials, 87 % of them.)
//
// A stream serves the recipients first, first+step, first+2*step, ...: a
// goroutine of a parallel benchmark has a stream of its own, so each
// recipient's sends stay in time order. Its one Request is filled in again
// for each decision, as the handler fills a new one.
type seedStream struct {
	recipients []string // all of them; the stream serves its share
	contents   []string
	first      int
	step       int
	i          int // sends made
	base       time.Time
	req        *Request
	// firstSends names each round's recipients anew ("user7-3"), so
	// every send is a recipient's first: its key does not exist yet.
	firstSends bool
}

const seedStreamRecipients = 1 << 16

// seedStreams returns n streams that share the recipients between them.
func seedStreams(n int) []*seedStream {
	recipients := make([]string, seedStreamRecipients)
	for i := range recipients {
		recipients[i] = "user" + strconv.Itoa(i)
	}
	contents := []string{"content-0", "content-1", "content-2", "content-3", "content-4"}
	base := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	out := make([]*seedStream, n)
	for g := range out {
		out[g] = &seedStream{recipients: recipients, contents: contents, first: g, step: n, base: base,
			req: req(base, vals{"recipient": "", "content": ""}, seedRules()...)}
	}
	return out
}

// next returns the stream's next request.
func (s *seedStream) next() *Request {
	per := s.perRound()
	round, j := s.i/per, s.i%per
	s.i++
	r := s.first + j*s.step
	const every = 72 * time.Minute
	s.req.Now = s.base.Add(time.Duration(round)*every + time.Duration(r)*every/seedStreamRecipients)
	who, what := s.recipients[r], s.contents[(r+round)%len(s.contents)]
	if s.firstSends {
		who += "-" + strconv.Itoa(round)
	}
	for k := range s.req.Checks {
		c := &s.req.Checks[k]
		c.Values[0] = who
		if len(c.Values) > 1 {
			c.Values[1] = what
		}
	}
	return s.req
}

// perRound is how many sends reach each of the stream's recipients once.
func (s *seedStream) perRound() int {
	return (len(s.recipients) - s.first + s.step - 1) / s.step
}

// warm sends every stream's recipients one round, in batches, before a
// benchmark times anything: each recipient then has its key, as one sent
// to in the last day has, and the benchmark measures that steady state
// whatever its b.N (without it, the first 65,536 sends create keys, which
// costs Redis about half as much again, and a longer run dilutes them).
func warm(b *testing.B, s Store, streams []*seedStream) {
	ctx := context.Background()
	for _, st := range streams {
		for left := st.perRound(); left > 0; left -= batchEntries {
			reqs := make([]Request, min(left, batchEntries))
			st.nextBatch(reqs)
			ds, err := s.DecideBatch(ctx, reqs, BatchEach)
			if err != nil {
				b.Fatal(err)
			}
			for _, d := range ds {
				if !admitted(b, d, nil) {
					return
				}
			}
		}
	}
}

// admitted fails the benchmark unless d admitted: the data set is built so
// that every decision is an admission.
func admitted(b *testing.B, d *Decision, err error) bool {
	switch {
	case err != nil:
		b.Error(err)
	case !d.Allowed:
		b.Errorf("denied by rule %d: the data set should admit every decision", d.Denier)
	default:
		return true
	}
	return false
}

// BenchmarkMemoryDecide is one decision of the seed config (4 rules, 2 logs)
// in the memory store, over 65,536 recipients: an admission.
func BenchmarkMemoryDecide(b *testing.B) {
	m := NewMemory(MemoryOptions{SweepInterval: -1}) // the sweeper runs on the wall clock, not the simulated one
	defer m.Close()
	decideInTurn(b, m)
}

// decideInTurn times s deciding one stream's admissions, one at a time.
func decideInTurn(b *testing.B, s Store) {
	st := seedStreams(1)[0]
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if d, err := s.Decide(ctx, st.next()); !admitted(b, d, err) {
			return
		}
	}
}

// BenchmarkMemoryDecideParallel is the same from every core at once.
func BenchmarkMemoryDecideParallel(b *testing.B) {
	m := NewMemory(MemoryOptions{SweepInterval: -1})
	defer m.Close()
	streams := seedStreams(runtime.GOMAXPROCS(0)) // one a goroutine
	var next atomic.Int64
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer() // the requests' set-up is not a decision
	b.RunParallel(func(pb *testing.PB) {
		s := streams[next.Add(1)-1]
		for pb.Next() {
			if d, err := m.Decide(ctx, s.next()); !admitted(b, d, err) {
				return
			}
		}
	})
}

// BenchmarkMemoryDecideRepeats is the memory store's other case: each
// recipient gets one message again and again, on the wall clock, and
// after two in 59 s the seed config denies it. Denials decode the key and
// write nothing back.
func BenchmarkMemoryDecideRepeats(b *testing.B) {
	m := NewMemory(MemoryOptions{})
	defer m.Close()
	rules := seedRules()
	reqs := make([]*Request, seedStreamRecipients)
	for i := range reqs {
		reqs[i] = req(time.Time{}, vals{"recipient": "user" + strconv.Itoa(i), "content": "content-" + strconv.Itoa(i%5)}, rules...)
	}
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	i, denied := 0, 0
	for b.Loop() {
		d, err := m.Decide(ctx, reqs[i&(len(reqs)-1)])
		if err != nil {
			b.Fatal(err)
		}
		if !d.Allowed {
			denied++
		}
		i++
	}
	b.ReportMetric(float64(denied)/float64(b.N), "denied/op")
}

// BenchmarkRedisDecide is one decision of the seed config on a real
// redis-server, from 32 concurrent callers, each with recipients of its
// own, each recipient's key made by a first round (see warm). It reports the batches whose write from Go found a key changed, per
// decision, and the server's CPU a decision (redis-µs/op; with REDIS_URL,
// only this benchmark should use that server).
func BenchmarkRedisDecide(b *testing.B) {
	c := redistest.Client(b)
	s := NewRedis(c, RedisOptions{Timeout: 5 * time.Second})
	defer s.Close()
	const parallelism = 16 // 32 callers on 2 cores
	streams := seedStreams(parallelism * runtime.GOMAXPROCS(0))
	warm(b, s, streams)
	cpu := redistest.CPUSeconds(b, c)
	var next atomic.Int64
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer() // nor is starting redis-server
	b.SetParallelism(parallelism)
	b.RunParallel(func(pb *testing.PB) {
		st := streams[next.Add(1)-1]
		for pb.Next() {
			if d, err := s.Decide(ctx, st.next()); !admitted(b, d, err) {
				return
			}
		}
	})
	b.StopTimer()
	b.ReportMetric(float64(s.Conflicts())/float64(b.N), "conflicts/op")
	b.ReportMetric((redistest.CPUSeconds(b, c)-cpu)*1e6/float64(b.N), "redis-µs/op")
}

// BenchmarkRedisDecideOneCaller is one decision at a time on a real
// redis-server: every batch holds one decision, as at a gateway's moderate
// load, so what a batch costs (its round trips, its go-redis pipelines)
// is paid by each decision whole. script is the default for a lone
// decision (one round trip, see GoBatchMin); go decides it in Go (two).
// redis-µs/op is the server's CPU a decision (with REDIS_URL, only this
// benchmark should use that server).
func BenchmarkRedisDecideOneCaller(b *testing.B) {
	for _, bc := range []struct {
		name       string
		goBatchMin int
	}{{"script", 0}, {"go", 1}} {
		b.Run(bc.name, func(b *testing.B) {
			c := redistest.Client(b)
			s := NewRedis(c, RedisOptions{Timeout: 5 * time.Second, GoBatchMin: bc.goBatchMin})
			defer s.Close()
			cpu := redistest.CPUSeconds(b, c)
			decideInTurn(b, s)
			b.StopTimer()
			b.ReportMetric((redistest.CPUSeconds(b, c)-cpu)*1e6/float64(b.N), "redis-µs/op")
		})
	}
}
