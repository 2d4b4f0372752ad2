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

// seedJSON is the seed config (see the README) on the memory store, with the
// recipient and content read from a JSON body.
const seedJSON = `{"name": "bench", "dimensions": {"recipient": "{json.to}", "content": "{json.content}"},
 "rules": [
  {"name": "recipient_minute", "by": ["recipient"], "limit": 15, "window": "1m"},
  {"name": "recipient_day", "by": ["recipient"], "limit": 50, "window": "24h"},
  {"name": "same_content_59s", "by": ["recipient", "content"], "limit": 2, "window": "59s"},
  {"name": "same_content_59m", "by": ["recipient", "content"], "limit": 5, "window": "59m"}]}`

// BenchmarkHandler is what frequency_cap adds to a request in Caddy: the
// body read and parsed, the decision (memory store, 100k recipients), the
// placeholders and the quota headers, before a next handler that reads the
// body as reverse_proxy would.
func BenchmarkHandler(b *testing.B) {
	h, err := load(b, seedJSON)
	if err != nil {
		b.Fatal(err)
	}
	// A new content every time, so that no cap denies (a denial is
	// logged): the body is made in the loop, a small part of the time.
	var body []byte
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		_, err := io.Copy(io.Discard, r.Body)
		return err
	})
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		who := (uint64(i) * 0x9E3779B97F4A7C15 >> 16) % 100_000
		body = fmt.Appendf(body[:0], `{"to":"user-%d","content":"content-%d","title":"Your order has shipped","amount":1}`, who, i)
		r := httptest.NewRequest(http.MethodPost, "/v1/send", bytes.NewReader(body))
		repl := caddy.NewReplacer()
		r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl))
		w := httptest.NewRecorder()
		if err := h.ServeHTTP(w, r, next); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
