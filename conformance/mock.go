package conformance

import (
	"bytes"
	"compress/flate"
	"compress/gzip"
	"compress/zlib"
	"crypto/rand"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
)

// Received is one request a provider mock received (through the gateway).
type Received struct {
	Method, Path, Proto string
	Header              http.Header
	// Body is the body as it arrived, in its Content-Encoding.
	Body []byte
	// Decoded is Body decoded from its Content-Encoding (gzip, deflate or
	// identity); nil when it could not be decoded (DecodeErr says why).
	Decoded   []byte
	DecodeErr error
}

// ContentEncoding is the request's Content-Encoding header ("" for none).
func (r Received) ContentEncoding() string { return r.Header.Get("Content-Encoding") }

// Recorder keeps every request a mock received, in order.
type Recorder struct {
	mu   sync.Mutex
	reqs []Received
}

// Requests returns a copy of what was received so far.
func (rec *Recorder) Requests() []Received {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return append([]Received(nil), rec.reqs...)
}

// Len is the number of requests received so far.
func (rec *Recorder) Len() int {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return len(rec.reqs)
}

// read reads and records r (its body decoded as providers do).
func (rec *Recorder) read(r *http.Request) Received {
	body, _ := io.ReadAll(io.LimitReader(r.Body, 16<<20))
	got := Received{
		Method: r.Method,
		Path:   r.URL.Path,
		Proto:  r.Proto,
		Header: r.Header.Clone(),
		Body:   body,
	}
	got.Decoded, got.DecodeErr = Decode(r.Header.Get("Content-Encoding"), body)
	rec.mu.Lock()
	rec.reqs = append(rec.reqs, got)
	rec.mu.Unlock()
	return got
}

// Decode decodes body from a Content-Encoding: identity (""), gzip, x-gzip
// or deflate (zlib-wrapped, as RFC 9110 says, or raw, as some clients send).
func Decode(encoding string, body []byte) ([]byte, error) {
	switch strings.ToLower(strings.TrimSpace(encoding)) {
	case "", "identity":
		return body, nil
	case "gzip", "x-gzip":
		zr, err := gzip.NewReader(bytes.NewReader(body))
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		b, err := io.ReadAll(zr)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		return b, nil
	case "deflate":
		if zr, err := zlib.NewReader(bytes.NewReader(body)); err == nil {
			if b, err := io.ReadAll(zr); err == nil {
				return b, nil
			}
		}
		b, err := io.ReadAll(flate.NewReader(bytes.NewReader(body)))
		if err != nil {
			return nil, fmt.Errorf("deflate: %w", err)
		}
		return b, nil
	default:
		return nil, fmt.Errorf("unsupported Content-Encoding %q", encoding)
	}
}

// Serve runs h on an httptest server on 127.0.0.1, closed when the test ends,
// and returns its address (host:port).
func Serve(t testing.TB, h http.Handler) string {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// UUID returns a random (version 4) UUID.
func UUID() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err)
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	io.WriteString(w, body)
}
