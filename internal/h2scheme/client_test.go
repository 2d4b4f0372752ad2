package h2scheme

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// echo answers each request with what it received: its method, path,
// host and header fields, one "name: value" line each, sorted.
func echo(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	fmt.Fprint(w, describe(r.Method, r.URL.RequestURI(), r.Host, r.Header, len(body)))
}

func describe(method, path, host string, h http.Header, bodyLen int) string {
	var lines []string
	for k, vs := range h {
		for _, v := range vs {
			lines = append(lines, strings.ToLower(k)+": "+v)
		}
	}
	sort.Strings(lines)
	return fmt.Sprintf("%s %s %s %d\n%s", method, path, host, bodyLen, strings.Join(lines, "\n"))
}

// expected is describe's text for the fields a client sent.
func expected(fields []hpack.HeaderField, bodyLen int) string {
	h := http.Header{}
	var method, path, host string
	for _, f := range fields {
		switch f.Name {
		case ":method":
			method = f.Value
		case ":path":
			path = f.Value
		case ":authority":
			host = f.Value
		case ":scheme":
		default:
			h.Add(f.Name, f.Value)
		}
	}
	return describe(method, path, host, h, bodyLen)
}

// serveH2 serves HTTP/2 with x/net's server (as Caddy does) on a loopback
// listener, each connection wrapped when wrap is set, and returns the
// address.
func serveH2(t testing.TB, wrap bool, opts Options, h http.HandlerFunc) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	srv := &http2.Server{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if wrap {
				c = Wrap(c, opts)
			}
			go srv.ServeConn(c, &http2.ServeConnOpts{Handler: h})
		}
	}()
	return ln.Addr().String()
}

func dial(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}
