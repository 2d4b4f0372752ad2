package caddymodule

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// seedBatchJSON is the seed config over Expo batches, under batch drop.
const seedBatchJSON = `{"name": "bench_batch", "batch": "drop", "dimensions": {"recipient": "{json.*.to}", "content": "{json.*.body}"},
 "rules": [
  {"name": "recipient_minute", "by": ["recipient"], "limit": 15, "window": "1m"},
  {"name": "recipient_day", "by": ["recipient"], "limit": 50, "window": "24h"},
  {"name": "same_content_59s", "by": ["recipient", "content"], "limit": 2, "window": "59s"}]}`

// benchBatchEntries is the size of BenchmarkHandlerBatch's Expo batch.
const benchBatchEntries = 500

// BenchmarkHandlerBatch is BenchmarkHandler for an Expo batch of 500
// recipients (the seed config under batch drop): the whole request, body
// reading and validation, entries, decisions, headers and answer,
// reported per entry (ns/entry). Building the body is not timed.
//
//   - memory: on the memory store (10M recipients, so that -count runs in
//     one process deny none either). It proves what a batch costs end to
//     end; less limiter's BenchmarkMemoryDecideBatch (ns/entry), it is
//     what the handler adds an entry.
//   - handler: on a store that admits every entry without work (answers
//     built once, before the timer). Its ns/entry is the handler's own
//     cost alone, with no store noise in it: the figure the handler's
//     budget (1 µs an entry) is held to.
func BenchmarkHandlerBatch(b *testing.B) {
	b.Run("memory", func(b *testing.B) {
		h, err := load(b, seedBatchJSON)
		if err != nil {
			b.Fatal(err)
		}
		batchBenchSent = runBatchBench(b, h, batchBenchSent)
	})
	b.Run("handler", func(b *testing.B) {
		h, err := load(b, seedBatchJSON)
		if err != nil {
			b.Fatal(err)
		}
		h.store = newAdmitAllStore(h, benchBatchEntries)
		runBatchBench(b, h, 0)
	})
}

// runBatchBench sends h one new batch per iteration, the i-th batch
// first, and returns the number of the next batch.
func runBatchBench(b *testing.B, h *Handler, i int) int {
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		_, err := io.Copy(io.Discard, r.Body)
		return err
	})
	var body []byte
	b.ReportAllocs()
	sent := 0
	var took time.Duration
	for b.Loop() {
		b.StopTimer()
		body = append(body[:0], '[')
		for k := range benchBatchEntries {
			if k > 0 {
				body = append(body, ',')
			}
			n := uint64(i*benchBatchEntries + k)
			who := (n * 0x9E3779B97F4A7C15 >> 16) % 10_000_000
			body = fmt.Appendf(body, `{"to":"user-%d","body":"content-%d","title":"Your order has shipped"}`, who, n)
		}
		body = append(body, ']')
		r := httptest.NewRequest(http.MethodPost, "/push/send", bytes.NewReader(body))
		repl := caddy.NewReplacer()
		r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl))
		w := httptest.NewRecorder()
		b.StartTimer()
		start := time.Now()
		if err := h.ServeHTTP(w, r, next); err != nil {
			b.Fatal(err)
		}
		took += time.Since(start)
		if w.Header().Get("Frequency-Cap-Dropped") != "" {
			b.Fatal("an entry was dropped: the data set should admit every entry")
		}
		if w.Header().Get("Ratelimit") == "" {
			b.Fatal("no quota headers: the batch was not decided")
		}
		i++
		sent++
	}
	b.ReportMetric(float64(took.Nanoseconds())/float64(sent*benchBatchEntries), "ns/entry")
	return i
}

// batchBenchSent carries BenchmarkHandlerBatch's batches over its runs in
// one process, which share the memory store: each run sends new entries.
var batchBenchSent int

// admitAllStore admits every request of a batch with answers made once,
// as the memory store would answer a first send to every recipient, so
// that a benchmark on it times the handler alone. Only DecideBatch works.
type admitAllStore struct {
	limiter.Store
	answers []*limiter.Decision
	checks  int
}

// newAdmitAllStore answers batches of up to n entries, each checked by
// every rule of h.
func newAdmitAllStore(h *Handler, n int) *admitAllStore {
	s := &admitAllStore{answers: make([]*limiter.Decision, n), checks: len(h.rules)}
	now := time.Now()
	for i := range s.answers {
		d := &limiter.Decision{Allowed: true, Denier: -1, Now: now}
		for _, cr := range h.rules {
			r := cr.rule
			d.Results = append(d.Results, limiter.Result{Rule: r, Limit: r.Limit, Used: 1, Remaining: r.Limit - 1, Reset: r.Window.Duration})
		}
		s.answers[i] = d
	}
	return s
}

func (s *admitAllStore) DecideBatch(_ context.Context, reqs []limiter.Request, _ limiter.BatchMode) ([]*limiter.Decision, error) {
	if len(reqs) > len(s.answers) {
		return nil, fmt.Errorf("admitAllStore: %d requests, answers for %d", len(reqs), len(s.answers))
	}
	for i := range reqs {
		if len(reqs[i].Checks) != s.checks {
			return nil, fmt.Errorf("admitAllStore: request %d has %d checks, not %d", i, len(reqs[i].Checks), s.checks)
		}
	}
	return s.answers[:len(reqs)], nil
}
