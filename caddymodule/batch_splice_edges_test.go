package caddymodule

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	dto "github.com/prometheus/client_model/go"
)

// serveDirect runs h on a request with body, as Caddy would, without a
// server in between.
func serveDirect(t *testing.T, h *Handler, method, body string, next caddyhttp.Handler) (*httptest.ResponseRecorder, error) {
	t.Helper()
	r := httptest.NewRequest(method, "/push/send", bytes.NewReader([]byte(body)))
	r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, caddy.NewReplacer()))
	w := httptest.NewRecorder()
	err := h.ServeHTTP(w, r, next)
	return w, err
}

func counterValue(t *testing.T, h *Handler) float64 {
	t.Helper()
	var m dto.Metric
	if err := h.metrics.spliceFailures.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// splice expo never passes a cut answer on as a whole one: an upstream that
// fails halfway through its answer leaves the answer to Caddy's error
// handling (the handler returns the error, nothing is written). A 204 or
// the answer to HEAD goes out as it came, without a Content-Length of the
// gateway's making, and neither counts as a splice failure.
func TestSpliceEdges(t *testing.T) {
	h, err := load(t, `{"name":"splice_edges","batch":"drop","splice":"expo","dimensions":{"recipient":"{json.*.to}"},
	 "rules":[{"name":"one","by":["recipient"],"limit":1,"window":"1m"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	ok := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		io.Copy(io.Discard, r.Body)
		return nil
	})
	if _, err := serveDirect(t, h, http.MethodPost, `[{"to":"a"}]`, ok); err != nil {
		t.Fatal(err)
	}

	cut := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusOK)
		io.WriteString(w, `{"data":[{"status":"ok"`)
		return caddyhttp.Error(http.StatusBadGateway, errors.New("upstream cut off"))
	})
	w, err := serveDirect(t, h, http.MethodPost, `[{"to":"a"},{"to":"b"}]`, cut)
	if err == nil || w.Body.Len() != 0 {
		t.Fatalf("a cut answer: err %v, body %q; want the error returned and nothing written", err, w.Body.String())
	}

	noContent := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
	w, err = serveDirect(t, h, http.MethodPost, `[{"to":"a"},{"to":"c"}]`, noContent)
	if err != nil || w.Code != http.StatusNoContent || w.Header().Get("Content-Length") != "" {
		t.Fatalf("204: %d, Content-Length %q, %v; want 204 without one", w.Code, w.Header().Get("Content-Length"), err)
	}
	head := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		w.Header().Set("Content-Length", "1234")
		w.WriteHeader(http.StatusOK)
		return nil
	})
	w, err = serveDirect(t, h, http.MethodHead, `[{"to":"a"},{"to":"d"}]`, head)
	if err != nil || w.Header().Get("Content-Length") != "1234" {
		t.Fatalf("HEAD: Content-Length %q, %v; want the upstream's 1234", w.Header().Get("Content-Length"), err)
	}
	if n := counterValue(t, h); n != 0 {
		t.Fatalf("%v splice failures counted; want none", n)
	}
}

// A batch with no entries names no recipient: [] is a 400 for the batch
// dimension under on_missing reject (not for a per-entry one), and under
// skip it passes, decided for nobody, as no rule applies without the
// batch dimension.
func TestEmptyBatchIsNoMissingValue(t *testing.T) {
	for _, skip := range []bool{false, true} {
		onMissing := ""
		if skip {
			onMissing = `"skip_missing":["recipient"],`
		}
		h, err := load(t, `{"name":"empty_batch",`+onMissing+`"dimensions":{"recipient":"{json.*.to}","content":"{json.*.body}"},
	 "rules":[{"name":"r","by":["recipient","content"],"limit":2,"window":"1m"}]}`)
		if err != nil {
			t.Fatal(err)
		}
		passed := false
		w, err := serveDirect(t, h, http.MethodPost, `[]`, caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
			passed = true
			return nil
		}))
		switch {
		case skip && (err != nil || !passed || w.Code != http.StatusOK):
			t.Errorf("[] under skip: %d %s %v; want passed on", w.Code, w.Body.String(), err)
		case !skip && (passed || w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), "missing value for dimension recipient: the batch names no recipient")):
			t.Errorf("[] under reject: %d %s %v; want the 400 of the batch dimension", w.Code, w.Body.String(), err)
		}
	}
}

// TestSpliceDropsTheUpstreamsDigests proves that an answer splice
// rewrites goes out without the upstream's digests and entity tag, which
// name the answer it gave (a probe's client got Expo's ETag on the
// rewritten tickets); one it passes as it came keeps them.
func TestSpliceDropsTheUpstreamsDigests(t *testing.T) {
	h, err := load(t, `{"name":"splice_digests","batch":"drop","splice":"expo","dimensions":{"recipient":"{json.*.to}"},
	 "rules":[{"name":"one","by":["recipient"],"limit":1,"window":"1m"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	expo := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Etag", `"t1"`)
		w.Header().Set("Content-Digest", "sha-256=:x:")
		io.WriteString(w, `{"data":[{"status":"ok","id":"1"}]}`)
		return nil
	})
	w, err := serveDirect(t, h, http.MethodPost, `[{"to":"d1"}]`, expo)
	if err != nil || w.Header().Get("Etag") == "" || w.Header().Get("Content-Digest") == "" {
		t.Fatalf("an answer passed as it came: %v, ETag %q, Content-Digest %q", err, w.Header().Get("Etag"), w.Header().Get("Content-Digest"))
	}
	w, err = serveDirect(t, h, http.MethodPost, `[{"to":"d1"},{"to":"d2"}]`, expo)
	if err != nil || !strings.Contains(w.Body.String(), "MessageRateExceeded") {
		t.Fatalf("no splice: %v %s", err, w.Body)
	}
	if e, d := w.Header().Get("Etag"), w.Header().Get("Content-Digest"); e != "" || d != "" {
		t.Errorf("a spliced answer kept ETag %q, Content-Digest %q", e, d)
	}
}
