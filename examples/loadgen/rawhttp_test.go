package main

import (
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// answers starts a server with the answers the open loop must read whole:
// with a length, chunked, closing the connection, and a 429. It returns
// the server's address and the count of connections it accepted.
func answers(t *testing.T) (addr string, conns *atomic.Int64) {
	conns = new(atomic.Int64)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(r.Body)
		if err != nil || !strings.HasPrefix(string(body), `{"to":`) {
			http.Error(w, "bad body", http.StatusBadRequest)
			return
		}
		switch r.URL.Path {
		case "/length":
			w.Header().Set("Content-Length", "6")
			io.WriteString(w, "queued")
		case "/chunked":
			io.WriteString(w, "que")
			w.(http.Flusher).Flush() // no length known: chunked
			io.WriteString(w, "ued")
		case "/close":
			w.Header().Set("Connection", "close")
			io.WriteString(w, "queued")
		case "/deny":
			w.Header().Set("Content-Length", "4")
			w.WriteHeader(http.StatusTooManyRequests)
			io.WriteString(w, "capd")
		default:
			http.NotFound(w, r)
		}
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://"), conns
}

// TestRawConnReadsEveryAnswerWhole proves that one connection carries
// request after request whatever framing the answers use, and dials again
// only after an answer that closes it.
func TestRawConnReadsEveryAnswerWhole(t *testing.T) {
	addr, conns := answers(t)
	bodies := &bodySource{recipients: 10, contents: defaultContents}
	for _, c := range []struct {
		path   string
		status int
		dials  int64 // connections accepted after three requests
	}{
		{"/length", 200, 1},
		{"/chunked", 200, 1},
		{"/deny", 429, 1},
		{"/close", 200, 3},
	} {
		before := conns.Load()
		rc := &rawConn{addr: addr, path: c.path, deadline: time.Now().Add(5 * time.Second)}
		for i := range 3 {
			if err := rc.send(bodies.body()); err != nil {
				t.Fatalf("%s: send %d: %v", c.path, i, err)
			}
			status, err := rc.receive()
			if err != nil || status != c.status {
				t.Fatalf("%s: answer %d: status %d, error %v; want %d", c.path, i, status, err, c.status)
			}
		}
		rc.drop()
		if got := conns.Load() - before; got != c.dials {
			t.Errorf("%s: %d connections for 3 requests, want %d", c.path, got, c.dials)
		}
	}
}

// TestRawConnRefusesWhatIsNotHTTP proves that an answer the reader cannot
// frame is an error, not a hang or a status.
func TestRawConnRefusesWhatIsNotHTTP(t *testing.T) {
	for name, answer := range map[string]string{
		"not HTTP":     "SSH-2.0-OpenSSH\r\n",
		"bad status":   "HTTP/1.1 2x0 OK\r\n\r\n",
		"bad length":   "HTTP/1.1 200 OK\r\nContent-Length: -1\r\n\r\n",
		"no framing":   "HTTP/1.1 200 OK\r\n\r\nqueued",
		"bad chunking": "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
	} {
		srv := rawServer(t, answer)
		rc := &rawConn{addr: srv, path: "/", deadline: time.Now().Add(5 * time.Second)}
		if err := rc.send([]byte(`{}`)); err != nil {
			t.Fatalf("%s: send: %v", name, err)
		}
		if status, err := rc.receive(); err == nil {
			t.Errorf("%s: status %d and no error", name, status)
		}
		rc.drop()
	}
}

// TestRawConnReadsTheFinalAnswer proves that interim answers are skipped,
// that an answer which has no body is not waited on for one, and that a
// Connection header listing close closes the connection.
func TestRawConnReadsTheFinalAnswer(t *testing.T) {
	for name, c := range map[string]struct {
		answer string
		status int
		closed bool
	}{
		"interim, then final": {"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok", 200, false},
		"304 with a length":   {"HTTP/1.1 304 Not Modified\r\nContent-Length: 5\r\n\r\n", 304, false},
		"close in a list":     {"HTTP/1.1 200 OK\r\nConnection: keep-alive, close\r\nContent-Length: 2\r\n\r\nok", 200, true},
		"chunked, gzipped":    {"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n", 200, false},
	} {
		rc := &rawConn{addr: rawServer(t, c.answer), path: "/", deadline: time.Now().Add(5 * time.Second)}
		if err := rc.send([]byte(`{}`)); err != nil {
			t.Fatalf("%s: send: %v", name, err)
		}
		status, err := rc.receive()
		if err != nil || status != c.status {
			t.Errorf("%s: status %d, error %v; want %d", name, status, err, c.status)
		}
		if closed := rc.c == nil; closed != c.closed {
			t.Errorf("%s: connection closed %v, want %v", name, closed, c.closed)
		}
		rc.drop()
	}
}

// TestOpenLoopAnswersEveryRequestSent proves that every request the open
// loop sends is counted once: answered, denied or failed.
func TestOpenLoopAnswersEveryRequestSent(t *testing.T) {
	addr, _ := answers(t)
	bodies := &bodySource{recipients: 10, contents: defaultContents}
	for _, c := range []struct {
		path           string
		denied, failed bool
	}{{"/length", false, false}, {"/deny", true, false}, {"/missing", false, true}} {
		const conns = 4
		before := bodies.next.Load()
		sl := openLoop(addr, c.path, bodies, conns, 200*time.Millisecond, 200)
		sent := int(bodies.next.Load()-before) - conns // each connection warmed up with one
		if sent < 30 {
			t.Fatalf("%s: %d requests sent in 200 ms at 200/s", c.path, sent)
		}
		want := [3]int{sent, 0, 0} // latencies, denied, failed
		switch {
		case c.denied:
			want[1] = sent
		case c.failed:
			want = [3]int{0, 0, sent}
		}
		if got := [3]int{len(sl.lat), sl.denied, sl.failed}; got != want {
			t.Errorf("%s: latencies, denied, failed = %v, want %v", c.path, got, want)
		}
	}
}

// rawServer accepts connections and answers each request with answer,
// whatever was asked; it returns its address.
func rawServer(t *testing.T, answer string) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				if _, err := c.Read(buf); err != nil {
					return
				}
				fmt.Fprint(c, answer)
				c.Read(buf) // until the client hangs up
			}()
		}
	}()
	return l.Addr().String()
}
