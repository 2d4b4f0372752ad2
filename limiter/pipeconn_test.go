package limiter

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// echo is one ECHO request on pc, waited for.
func echo(pc *pipeConn, msg string) (string, error) {
	req := &pipeReq{n: 1}
	req.cmds = appendArray(req.cmds, 2)
	req.cmds = appendBulkString(req.cmds, "ECHO")
	req.cmds = appendBulkString(req.cmds, msg)
	in := make(chan struct{}, 1)
	req.done = func(*pipeReq) { in <- struct{}{} }
	pc.send(req)
	<-in
	if req.err != nil {
		return "", req.err
	}
	if err := req.replyErr(req.vals[0]); err != nil {
		return "", err
	}
	return string(req.str(req.vals[0])), nil
}

func tcpDial(addr string) func(context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "tcp", addr)
	}
}

// Many senders share one connection and each gets its own replies: the
// reader hands replies out in the order the requests were written.
func TestPipeConnRepliesInOrder(t *testing.T) {
	c := redistest.Client(t)
	pc := newPipeConn(tcpDial(c.Options().Addr), time.Second, 5*time.Second, 0)
	defer pc.close()
	var wg sync.WaitGroup
	for g := 0; g < 32; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				want := fmt.Sprintf("g%d-%d-%s", g, i, strings.Repeat("x", i))
				got, err := echo(pc, want)
				if err != nil || got != want {
					t.Errorf("ECHO %q: got %q, %v", want, got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// fakeServer accepts connections and answers each with reply (nothing when
// reply is ""), then keeps it open. It counts the connections.
func fakeServer(t *testing.T, reply string) (addr string, accepted *atomic.Int64) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted = new(atomic.Int64)
	var conns []net.Conn
	var mu sync.Mutex
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				br := bufio.NewReader(c)
				if _, err := br.ReadString('\n'); err == nil && reply != "" {
					c.Write([]byte(reply))
				}
			}()
		}
	}()
	return ln.Addr().String(), accepted
}

// A server that never answers fails the request with ErrTimeout at its
// deadline, not later, and the next request dials a new connection.
func TestPipeConnSilentServerTimesOut(t *testing.T) {
	addr, accepted := fakeServer(t, "")
	timeout := 200 * time.Millisecond
	pc := newPipeConn(tcpDial(addr), time.Second, timeout, 0)
	defer pc.close()
	for i := 1; i <= 2; i++ {
		start := time.Now()
		_, err := echo(pc, "hello")
		took := time.Since(start)
		if !errors.Is(err, ErrTimeout) {
			t.Fatalf("request %d: err %v, want ErrTimeout", i, err)
		}
		if took < timeout || took > timeout+time.Second {
			t.Fatalf("request %d failed after %s; its deadline was %s", i, took, timeout)
		}
		if n := accepted.Load(); n != int64(i) {
			t.Fatalf("after request %d: %d connections, want %d (a timed-out connection is not reused)", i, n, i)
		}
	}
}

// A reply that is not RESP fails the request with ErrStore and drops the
// connection; nothing panics.
func TestPipeConnGarbageReply(t *testing.T) {
	for _, reply := range []string{"hello\r\n", "$999999999999\r\n", "*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", "$3\r\nabcde\r\n", ":12x\r\n"} {
		addr, _ := fakeServer(t, reply)
		pc := newPipeConn(tcpDial(addr), time.Second, time.Second, 0)
		_, err := echo(pc, "hello")
		pc.close()
		if !errors.Is(err, ErrStore) || !strings.Contains(err.Error(), "protocol") {
			t.Errorf("reply %q: err %v, want ErrStore naming a protocol error", reply, err)
		}
	}
}

// A connection the server closes while idle (CLIENT KILL, a restart, an
// idle timeout) fails no request: the reader notices the close, and the
// next request dials again.
func TestPipeConnIdleCloseFailsNothing(t *testing.T) {
	c := redistest.Client(t)
	pc := newPipeConn(tcpDial(c.Options().Addr), time.Second, 5*time.Second, 0)
	defer pc.close()
	ctx := context.Background()
	for i := 0; i < 3; i++ {
		if _, err := echo(pc, "before"); err != nil {
			t.Fatal(err)
		}
		pc.mu.Lock()
		local := pc.sess.conn.LocalAddr().String()
		ended := pc.sess.ended
		pc.mu.Unlock()
		if err := c.ClientKillByFilter(ctx, "ADDR", local).Err(); err != nil {
			t.Fatalf("CLIENT KILL: %v", err)
		}
		select {
		case <-ended:
		case <-time.After(5 * time.Second):
			t.Fatal("the reader did not notice the server closing the connection")
		}
		if got, err := echo(pc, "after"); err != nil || got != "after" {
			t.Fatalf("the request after an idle close: %q, %v", got, err)
		}
	}
}

// A request sent after close fails at once.
func TestPipeConnClosed(t *testing.T) {
	c := redistest.Client(t)
	pc := newPipeConn(tcpDial(c.Options().Addr), time.Second, time.Second, 0)
	if _, err := echo(pc, "x"); err != nil {
		t.Fatal(err)
	}
	pc.close()
	if _, err := echo(pc, "x"); !errors.Is(err, ErrStore) {
		t.Fatalf("after close: %v, want ErrStore", err)
	}
}

// readReply reads every reply kind, nested arrays included, and refuses
// what is not RESP2 with errProtocol.
func TestReadReply(t *testing.T) {
	good := "+OK\r\n-ERR bad\r\n:-42\r\n$5\r\nhe\r\no\r\n$-1\r\n*-1\r\n*3\r\n$1\r\na\r\n*2\r\n:1\r\n$0\r\n\r\n$-1\r\n"
	br := bufio.NewReader(strings.NewReader(good))
	var vals []respVal
	var data []byte
	var err error
	for i := 0; i < 7; i++ {
		if vals, data, err = readReply(br, vals, data, 0); err != nil {
			t.Fatalf("reply %d: %v", i, err)
		}
	}
	r := &pipeReq{vals: vals, data: data}
	got := []string{}
	for _, v := range vals {
		kind := v.kind
		if kind == 0 {
			kind = '0'
		}
		got = append(got, fmt.Sprintf("%c:%d:%q", kind, v.n, r.str(v)))
	}
	want := []string{`+:0:"OK"`, `-:0:"ERR bad"`, `::-42:""`, `$:0:"he\r\no"`, `0:0:""`, `0:0:""`,
		`*:3:""`, `$:0:"a"`, `*:2:""`, `::1:""`, `$:0:""`, `0:0:""`}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Fatalf("got  %v\nwant %v", got, want)
	}
	if i := skip(vals, 6); i != len(vals) {
		t.Fatalf("skip over the array ends at %d, want %d", i, len(vals))
	}
	for _, bad := range []string{"", "+OK\n", "?\r\n", ":x\r\n", "$-2\r\n", "$4\r\nab\r\n", "*2\r\n:1\r\n", "*1\r\n*1\r\n*1\r\n*1\r\n*1\r\n:1\r\n", "$1\r\nab\r\n", strings.Repeat("+", 20000) + "\r\n"} {
		_, _, err := readReply(bufio.NewReader(strings.NewReader(bad)), nil, nil, 0)
		if err == nil {
			t.Errorf("%.30q: no error", bad)
		}
	}
}

// countingDial counts the dials of d.
func countingDial(d func(context.Context) (net.Conn, error), n *atomic.Int64) func(context.Context) (net.Conn, error) {
	return func(ctx context.Context) (net.Conn, error) {
		n.Add(1)
		return d(ctx)
	}
}

// While Redis refuses connections, a failed dial fails the requests of the
// next dialBackoff at once, without dialling again; after it, the next
// request dials.
func TestPipeConnFailedDialBacksOff(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens there now
	var dials atomic.Int64
	pc := newPipeConn(countingDial(tcpDial(addr), &dials), time.Second, time.Second, 0)
	defer pc.close()
	for i := 0; i < 20; i++ {
		if _, err := echo(pc, "x"); !errors.Is(err, ErrStore) {
			t.Fatalf("request %d to a closed port: %v, want ErrStore", i, err)
		}
	}
	if n := dials.Load(); n != 1 {
		t.Fatalf("%d dials for 20 requests within the back-off, want 1", n)
	}
	time.Sleep(dialBackoff + 10*time.Millisecond)
	echo(pc, "x")
	if n := dials.Load(); n != 2 {
		t.Fatalf("%d dials after the back-off, want 2", n)
	}
}

// With a maximum age (Sentinel), connections are replaced as they age,
// and no request fails for it: what is in flight on the old connection is
// answered there.
func TestPipeConnMaxAgeReplacesWithoutFailures(t *testing.T) {
	c := redistest.Client(t)
	var dials atomic.Int64
	pc := newPipeConn(countingDial(tcpDial(c.Options().Addr), &dials), time.Second, 5*time.Second, 5*time.Millisecond)
	var wg sync.WaitGroup
	stop := time.Now().Add(300 * time.Millisecond)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; time.Now().Before(stop); i++ {
				want := fmt.Sprintf("g%d-%d", g, i)
				if got, err := echo(pc, want); err != nil || got != want {
					t.Errorf("ECHO %q: got %q, %v", want, got, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	pc.close()
	if n := dials.Load(); n < 10 {
		t.Fatalf("%d dials in 300 ms with a 5 ms maximum age", n)
	}
}
