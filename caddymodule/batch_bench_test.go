package caddymodule

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// seedBatchJSON is the seed config over Expo batches, under batch drop.
const seedBatchJSON = `{"name": "bench_batch", "batch": "drop", "dimensions": {"recipient": "{json.*.to}", "content": "{json.*.body}"},
 "rules": [
  {"name": "recipient_minute", "by": ["recipient"], "limit": 15, "window": "1m"},
  {"name": "recipient_day", "by": ["recipient"], "limit": 50, "window": "24h"},
  {"name": "same_content_59s", "by": ["recipient", "content"], "limit": 2, "window": "59s"}]}`

// BenchmarkHandlerBatch is BenchmarkHandler for an Expo batch of 100
// recipients (memory store, 100k recipients), none denied: the cost per
// request; divide by 100 for the cost per recipient.
func BenchmarkHandlerBatch(b *testing.B) {
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
	i := 0
	for b.Loop() {
		body = append(body[:0], '[')
		for k := range 100 {
			if k > 0 {
				body = append(body, ',')
			}
			n := uint64(i*100 + k)
			who := (n * 0x9E3779B97F4A7C15 >> 16) % 100_000
			body = fmt.Appendf(body, `{"to":"user-%d","body":"content-%d","title":"Your order has shipped"}`, who, n)
		}
		body = append(body, ']')
		r := httptest.NewRequest(http.MethodPost, "/push/send", bytes.NewReader(body))
		repl := caddy.NewReplacer()
		r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl))
		w := httptest.NewRecorder()
		if err := h.ServeHTTP(w, r, next); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
