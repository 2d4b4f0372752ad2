package caddymodule

import (
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"
)

// TestReadAtMostSizesItsFirstBuffer proves readAtMost reads every body
// whole, whatever its declared length says, into a first buffer of the
// declared size (and a byte to see the end), but never larger than
// firstRead: a sender that declares max_body and sends three bytes does
// not make the gateway hold max_body.
func TestReadAtMostSizesItsFirstBuffer(t *testing.T) {
	read := func(declared int64, body string) []byte {
		t.Helper()
		r := httptest.NewRequest("POST", "/", strings.NewReader(body))
		r.ContentLength = declared
		b, err := readAtMost(r, 1<<20)
		if err != nil || string(b) != body {
			t.Fatalf("declared %d: read %q, %v; want %q", declared, b, err, body)
		}
		return b
	}
	if b := read(8, "12345678"); cap(b) != 9 {
		t.Errorf("declared 8: first buffer of %d bytes, want 9", cap(b))
	}
	if b := read(1<<20, "abc"); cap(b) > firstRead {
		t.Errorf("declared 1 MiB, sent 3 bytes: held %d bytes, more than %d", cap(b), firstRead)
	}
	read(-1, strings.Repeat("x", 600)) // unknown length
	read(4, "longer than declared")    // a wrong declaration
}

// timeoutBody fails its reads as a connection past Caddy's read_body
// deadline does.
type timeoutBody struct{}

func (timeoutBody) Read([]byte) (int, error) {
	return 0, &net.OpError{Op: "read", Net: "tcp", Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 28081}, Err: os.ErrDeadlineExceeded}
}
func (timeoutBody) Close() error { return nil }

// A body that arrives too slowly for read_body is a 408 that says so,
// without the connection's addresses (it was a 400 quoting them).
func TestSlowBodyIsATimeout(t *testing.T) {
	r := httptest.NewRequest("POST", "/", nil)
	r.Body, r.ContentLength = timeoutBody{}, -1
	_, fail := readBody(r, needJSON, 1<<20)
	if fail == nil || fail.Status != http.StatusRequestTimeout || strings.Contains(fail.Reason, "127.0.0.1") {
		t.Fatalf("failure %+v; want 408 without addresses", fail)
	}
}
