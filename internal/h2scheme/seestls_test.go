package h2scheme

import (
	"io"
	"net"
	"testing"
)

// TestSeesTLSBeforeTLS proves that a wrapper placed before the TLS
// listener says so: a plain connection that opens with a TLS handshake
// record calls SeesTLS and passes untouched; one that opens with HTTP/1
// or the HTTP/2 preface does not call it. (Caddy accepts
// "listener_wrappers { h2_scheme tls }", and the wrapper then fixes
// nothing.)
func TestSeesTLSBeforeTLS(t *testing.T) {
	for _, tc := range []struct {
		first string
		sees  bool
	}{
		{"\x16\x03\x01\x00\xa5\x01", true},
		{"POST /v1/send HTTP/1.1\r\n", false},
		{clientPreface, false},
	} {
		client, server := net.Pipe()
		seen := 0
		c := Wrap(server, Options{SeesTLS: func() { seen++ }})
		go func() {
			client.Write([]byte(tc.first))
			client.Close()
		}()
		got, err := io.ReadAll(c)
		if err != nil && err != io.EOF && err != io.ErrClosedPipe {
			t.Errorf("%q: %v", tc.first, err)
		}
		if tc.sees && string(got) != tc.first {
			t.Errorf("%q: passed %q, want it untouched", tc.first, got)
		}
		if (seen > 0) != tc.sees || seen > 1 {
			t.Errorf("%q: SeesTLS called %d times", tc.first, seen)
		}
		c.Close()
	}
}
