package caddymodule

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"

	"github.com/freqcap/caddy-freqcap/caddymodule/internal/reply"
)

// Helpers shared by FuzzJSONBody and FuzzFormBody. The seed corpora live in
// testdata/fuzz/<FuzzName>/ and run with every plain `go test`; search
// further with, for example,
//
//	go test -run='^$' -fuzz='^FuzzJSONBody$' -fuzztime=20000x -fuzzminimizetime=20x ./caddymodule/
//
// (a count rather than a duration: Go 1.26's fuzz coordinator can report a
// spurious "context deadline exceeded" when a duration runs out,
// golang/go#75804).

// fzBody is a request body that counts what the handler reads of it and
// whether it was closed.
type fzBody struct {
	r      *bytes.Reader
	read   int
	closed bool
}

func (b *fzBody) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	b.read += n
	return n, err
}

func (b *fzBody) Close() error { b.closed = true; return nil }

// fzMaxBody maps a fuzzed number to a max_body: 0 is the default, anything
// else at most 2 MiB, so that both small limits and bodies far under the
// limit get explored.
func fzMaxBody(n uint32) int64 {
	if n == 0 {
		return DefaultMaxBody
	}
	return int64(min(n, 2<<20))
}

// fzRequest is a POST of data, with a Content-Length, or chunked (no
// length known in advance) as an HTTP/1.1 server sees it.
func fzRequest(data []byte, chunked bool) (*http.Request, *fzBody) {
	body := &fzBody{r: bytes.NewReader(data)}
	r := httptest.NewRequest(http.MethodPost, "/v1/send", nil)
	r.Body = body
	r.ContentLength = int64(len(data))
	if chunked {
		r.ContentLength = -1
		r.TransferEncoding = []string{"chunked"}
	}
	return r, body
}

// fzReadBody runs readBody on data and checks what holds whatever the
// body is: nothing past max_body+1 bytes is read (the one byte more is
// how a body of exactly max_body is told from a longer one; with a
// Content-Length over the limit nothing is read at all), a body over the
// limit is answered 413, and an accepted body is handed on byte for byte,
// its Close reaching the original. fail is nil when the body was accepted.
func fzReadBody(t *testing.T, data []byte, needs int, maxBody int64, chunked bool) (*body, *reply.Failure) {
	t.Helper()
	r, orig := fzRequest(data, chunked)
	b, fail := readBody(r, needs, maxBody)
	if int64(orig.read) > maxBody+1 {
		t.Fatalf("read %d bytes with max_body %d", orig.read, maxBody)
	}
	if int64(len(data)) > maxBody {
		if fail == nil || fail.Status != http.StatusRequestEntityTooLarge {
			t.Fatalf("body of %d bytes with max_body %d: got %+v, want 413", len(data), maxBody, fail)
		}
		if !chunked && orig.read != 0 {
			t.Fatalf("Content-Length %d over max_body %d, yet %d bytes were read", len(data), maxBody, orig.read)
		}
		return nil, fail
	}
	if orig.read != len(data) {
		t.Fatalf("body of %d bytes, %d read", len(data), orig.read)
	}
	if fail != nil {
		if fail.Status != http.StatusBadRequest {
			t.Fatalf("body of %d bytes with max_body %d: status %d (%s), want 400 or success", len(data), maxBody, fail.Status, fail.Reason)
		}
		return nil, fail
	}
	handed, err := io.ReadAll(r.Body)
	if err != nil || !bytes.Equal(handed, data) {
		t.Fatalf("body handed on is %q (%v), want the %q sent", handed, err, data)
	}
	if err := r.Body.Close(); err != nil || !orig.closed {
		t.Fatalf("closing the body handed on: %v, original closed %v", err, orig.closed)
	}
	return b, nil
}

// fzPlaceholder resolves {<prefix><key>} through a Caddy replacer as the
// handler does, and checks that it agrees with the body's own lookup; a
// key that a placeholder cannot hold gives ok false.
func fzPlaceholder(t *testing.T, b *body, prefix, key string) (value string, ok bool) {
	t.Helper()
	v, found := b.provide(prefix + key)
	direct := ""
	if found {
		s, isString := v.(string)
		if !isString {
			t.Fatalf("{%s%s} is a %T, want a string", prefix, key, v)
		}
		direct = s
	}
	if strings.ContainsAny(key, "{}\\") {
		return direct, false
	}
	repl := caddy.NewReplacer()
	repl.Map(b.provide)
	got := repl.ReplaceAll("{"+prefix+key+"}", "")
	if got != direct {
		// A value holding "{...}" must come out as text, never be
		// resolved again as a placeholder.
		t.Fatalf("{%s%s}: replacer gives %q, the body %q", prefix, key, got, direct)
	}
	return got, true
}
