package caddymodule

import (
	"net/http/httptest"
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
