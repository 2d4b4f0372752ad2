package limitertest

import (
	"context"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
)

// BatchEntries is the size of the benchmarks' batch sends: the issue's
// 500-recipient Expo batch.
const BatchEntries = 500

// nextBatch fills reqs with the stream's next len(reqs) requests, each with
// values of its own (a stream reuses its one Request). Each request's checks
// and values are allocated on the first batch and filled in again for the
// next ones: building the requests is the caller's work, not the store's,
// and allocating them anew for every batch (five allocations an entry) was
// a fifth of the time this benchmark measured.
func (s *seedStream) nextBatch(reqs []limiter.Request) {
	for i := range reqs {
		r := s.Next()
		q := &reqs[i]
		if len(q.Checks) != len(r.Checks) {
			q.Checks = make([]limiter.Check, len(r.Checks))
		}
		for k, c := range r.Checks {
			c.Values = append(q.Checks[k].Values[:0], c.Values...)
			q.Checks[k] = c
		}
		q.Now = r.Now
	}
}

// KeysBefore is what the keys of a benchmark's sends hold before them.
type KeysBefore int

const (
	KeysAsTheyCome KeysBefore = iota // a first round creates them, later ones update them
	KeysMade                         // made by a round before the timer (warm): every send updates
	KeysNew                          // every send is a recipient's first: it creates its key
)

// DecideBatches decides b.N batches of batchEntries from perCPU callers a
// CPU (one stream each), checking that every entry is admitted, and
// reports entries/s and the time per entry; with rc, the client of a Redis
// store, also the server's CPU an entry.
func DecideBatches(b *testing.B, s limiter.Store, perCPU int, sends KeysBefore, rc *redis.Client) {
	streams := SeedStreams(perCPU * runtime.GOMAXPROCS(0))
	switch sends {
	case KeysMade:
		Warm(b, s, streams)
	case KeysNew:
		for _, st := range streams {
			st.firstSends = true
		}
	}
	var next atomic.Int64
	ctx := context.Background()
	onRedis := rc != nil
	var cpu float64
	if onRedis {
		cpu = redistest.CPUSeconds(b, rc)
	}
	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	b.SetParallelism(perCPU)
	b.RunParallel(func(pb *testing.PB) {
		st := streams[next.Add(1)-1]
		reqs := make([]limiter.Request, BatchEntries)
		for pb.Next() {
			st.nextBatch(reqs)
			ds, err := s.DecideBatch(ctx, reqs, limiter.BatchAll)
			if err != nil {
				b.Error(err)
				return
			}
			for _, d := range ds {
				if !Admitted(b, d, nil) {
					return
				}
			}
		}
	})
	b.StopTimer()
	entries := float64(b.N) * BatchEntries
	b.ReportMetric(entries/time.Since(start).Seconds(), "entries/s")
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/entries, "ns/entry")
	if onRedis {
		b.ReportMetric((redistest.CPUSeconds(b, rc)-cpu)*1e6/entries, "redis-µs/entry")
	}
}

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
	req        *limiter.Request
	// firstSends names each round's recipients anew ("user7-3"), so
	// every send is a recipient's first: its key does not exist yet.
	firstSends bool
}

const SeedStreamRecipients = 1 << 16

// SeedStreams returns n streams that share the recipients between them.
func SeedStreams(n int) []*seedStream {
	recipients := make([]string, SeedStreamRecipients)
	for i := range recipients {
		recipients[i] = "user" + strconv.Itoa(i)
	}
	contents := []string{"content-0", "content-1", "content-2", "content-3", "content-4"}
	base := time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)
	out := make([]*seedStream, n)
	for g := range out {
		out[g] = &seedStream{recipients: recipients, contents: contents, first: g, step: n, base: base,
			req: Req(base, Vals{"recipient": "", "content": ""}, SeedRules()...)}
	}
	return out
}

// Next returns the stream's next request.
func (s *seedStream) Next() *limiter.Request {
	per := s.perRound()
	round, j := s.i/per, s.i%per
	s.i++
	r := s.first + j*s.step
	const every = 72 * time.Minute
	s.req.Now = s.base.Add(time.Duration(round)*every + time.Duration(r)*every/SeedStreamRecipients)
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

// Warm sends every stream's recipients one round, in batches, before a
// benchmark times anything: each recipient then has its key, as one sent
// to in the last day has, and the benchmark measures that steady state
// whatever its b.N (without it, the first 65,536 sends create keys, which
// costs Redis about half as much again, and a longer run dilutes them).
func Warm(b *testing.B, s limiter.Store, streams []*seedStream) {
	ctx := context.Background()
	for _, st := range streams {
		for left := st.perRound(); left > 0; left -= BatchEntries {
			reqs := make([]limiter.Request, min(left, BatchEntries))
			st.nextBatch(reqs)
			ds, err := s.DecideBatch(ctx, reqs, limiter.BatchEach)
			if err != nil {
				b.Fatal(err)
			}
			for _, d := range ds {
				if !Admitted(b, d, nil) {
					return
				}
			}
		}
	}
}

// Admitted fails the benchmark unless d admitted: the data set is built so
// that every decision is an admission.
func Admitted(b *testing.B, d *limiter.Decision, err error) bool {
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

// DecideInTurn times s deciding one stream's admissions, one at a time.
func DecideInTurn(b *testing.B, s limiter.Store) {
	st := SeedStreams(1)[0]
	ctx := context.Background()
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if d, err := s.Decide(ctx, st.Next()); !Admitted(b, d, err) {
			return
		}
	}
}
