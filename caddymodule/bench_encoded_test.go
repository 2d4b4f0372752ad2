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
	"go.uber.org/zap"

	"github.com/freqcap/caddy-freqcap/internal/bodycodec"
	"github.com/freqcap/caddy-freqcap/limiter"
)

// BenchmarkHandlerBatchEncoded is BenchmarkHandlerBatch's handler case (a
// store that answers without work, so the figure is the handler's own
// CPU) for the same 500-message Expo batch sent plain and gzipped, as
// expo-server-sdk sends every batch over 1 KB; "drop" has the store deny
// the first recipient, so that batch drop removes it and the body goes on
// re-encoded. Side by side in one run, gzip/drop less plain/drop is what
// an encoded batch costs an entry, decoding and re-encoding included:
//
//	go test -run '^$' -bench 'BenchmarkHandlerBatchEncoded' -count 8 ./caddymodule | benchstat -col /coding -
func BenchmarkHandlerBatchEncoded(b *testing.B) {
	for _, drop := range []bool{false, true} {
		for _, coding := range []bodycodec.Coding{bodycodec.Identity, bodycodec.Gzip} {
			name := fmt.Sprintf("drop=%v/coding=%v", drop, coding)
			b.Run(name, func(b *testing.B) {
				h, err := load(b, seedBatchJSON)
				if err != nil {
					b.Fatal(err)
				}
				store := newAdmitAllStore(h, benchBatchEntries)
				if drop {
					store.answers[0] = deniedByFirstRule(h, store.answers[0].Now)
				}
				h.store = store
				h.logger = zap.NewNop() // the denial's debug line is not what is measured
				runEncodedBatchBench(b, h, coding, drop)
			})
		}
	}
}

// deniedByFirstRule is the answer of a send the first rule denies.
func deniedByFirstRule(h *Handler, now time.Time) *limiter.Decision {
	d := &limiter.Decision{Denier: 0, RetryAfter: time.Minute, Now: now}
	for i, cr := range h.rules {
		r := cr.rule
		res := limiter.Result{Rule: r, Limit: r.Limit, Used: 1, Remaining: r.Limit - 1, Reset: r.Window.Duration}
		if i == 0 {
			res.Used, res.Remaining, res.Denied, res.RetryAfter = r.Limit, 0, true, time.Minute
		}
		d.Results = append(d.Results, res)
	}
	return d
}

// runEncodedBatchBench sends h the same batch every iteration, encoded in
// coding once before the timer, and checks that the upstream got what it
// should: the bytes as sent, or (drop) the batch less its first entry in
// the same coding.
func runEncodedBatchBench(b *testing.B, h *Handler, coding bodycodec.Coding, drop bool) {
	plain := []byte{'['}
	for k := range benchBatchEntries {
		if k > 0 {
			plain = append(plain, ',')
		}
		plain = fmt.Appendf(plain, `{"to":"ExponentPushToken[user-%07d]","body":"Your order %d has shipped","title":"Orders"}`, k*7919%10_000_000, k)
	}
	plain = append(plain, ']')
	sent, err := bodycodec.Encode(coding, plain)
	if err != nil {
		b.Fatal(err)
	}
	var got []byte
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		var err error
		got, err = io.ReadAll(r.Body)
		return err
	})
	b.ReportAllocs()
	var took time.Duration
	n := 0
	for b.Loop() {
		b.StopTimer()
		r := httptest.NewRequest(http.MethodPost, "/push/send", bytes.NewReader(sent))
		if coding != bodycodec.Identity {
			r.Header.Set("Content-Encoding", coding.String())
		}
		r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, caddy.NewReplacer()))
		w := httptest.NewRecorder()
		b.StartTimer()
		start := time.Now()
		if err := h.ServeHTTP(w, r, next); err != nil {
			b.Fatal(err)
		}
		took += time.Since(start)
		n++
	}
	b.StopTimer()
	b.ReportMetric(float64(took.Nanoseconds())/float64(n*benchBatchEntries), "ns/entry")
	if !drop {
		if !bytes.Equal(got, sent) {
			b.Fatal("the upstream did not get the bytes as sent")
		}
		return
	}
	out, _, err := bodycodec.Decode(coding, got, 1<<20)
	if err != nil || !bytes.HasPrefix(out, []byte(`[{"to":"ExponentPushToken[user-0007919]"`)) {
		b.Fatalf("the upstream got %.60q (%v), want the batch less its first entry", out, err)
	}
}
