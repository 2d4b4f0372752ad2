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
)

// seedBatchJSON is the seed config over Expo batches, under batch drop.
const seedBatchJSON = `{"name": "bench_batch", "batch": "drop", "dimensions": {"recipient": "{json.*.to}", "content": "{json.*.body}"},
 "rules": [
  {"name": "recipient_minute", "by": ["recipient"], "limit": 15, "window": "1m"},
  {"name": "recipient_day", "by": ["recipient"], "limit": 50, "window": "24h"},
  {"name": "same_content_59s", "by": ["recipient", "content"], "limit": 2, "window": "59s"}]}`

// BenchmarkHandlerBatch is BenchmarkHandler for an Expo batch of 500
// recipients (the seed config under batch drop, memory store, 10M
// recipients, so that -count runs in one process deny none either): the whole request, body parsing, entries,
// 500 decisions and headers, reported per entry (ns/entry). Less the
// decisions (limiter's BenchmarkMemoryDecideBatch, ns/entry), it is what
// the handler adds an entry. Building the body is not timed.
func BenchmarkHandlerBatch(b *testing.B) {
	const entries = 500
	h, err := load(b, seedBatchJSON)
	if err != nil {
		b.Fatal(err)
	}
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		_, err := io.Copy(io.Discard, r.Body)
		return err
	})
	var body []byte
	b.ReportAllocs()
	i, sent := batchBenchSent, 0
	var took time.Duration
	for b.Loop() {
		b.StopTimer()
		body = append(body[:0], '[')
		for k := range entries {
			if k > 0 {
				body = append(body, ',')
			}
			n := uint64(i*entries + k)
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
		i++
		sent++
	}
	batchBenchSent = i
	b.ReportMetric(float64(took.Nanoseconds())/float64(sent*entries), "ns/entry")
}

// batchBenchSent carries BenchmarkHandlerBatch's batches over its runs in
// one process, which share the memory store: each run sends new entries.
var batchBenchSent int
