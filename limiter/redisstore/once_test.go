package redisstore

import (
	"context"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// lostReply is a connection on which the network fails once, right after
// the server has answered a script run (EVALSHA or EVAL) sent on it: the
// script ran, and its reply never reaches the client.
type lostReply struct {
	net.Conn
	armed *atomic.Bool // shared by every connection: it fails once in all
	mu    sync.Mutex
	drop  bool
}

func (c *lostReply) Write(b []byte) (int, error) {
	n, err := c.Conn.Write(b)
	s := strings.ToLower(string(b))
	if err == nil && (strings.Contains(s, "\r\nevalsha\r\n") || strings.Contains(s, "\r\neval\r\n")) && c.armed.CompareAndSwap(true, false) {
		c.mu.Lock()
		c.drop = true
		c.mu.Unlock()
	}
	return n, err
}

func (c *lostReply) Read(b []byte) (int, error) {
	c.mu.Lock()
	drop := c.drop
	c.mu.Unlock()
	if !drop {
		return c.Conn.Read(b)
	}
	// Wait for the answer, so that the script surely ran, then lose it;
	// a NOSCRIPT (nothing ran) passes, and the next run is lost instead.
	n, err := c.Conn.Read(b)
	c.mu.Lock()
	c.drop = false
	c.mu.Unlock()
	if err == nil && strings.HasPrefix(string(b[:n]), "-NOSCRIPT") {
		c.armed.Store(true)
		return n, nil
	}
	c.Conn.Close()
	return 0, net.ErrClosed
}

// On a cluster, a script run whose reply is lost is never sent again: it
// ran once, so the send is counted once (go-redis re-sent it, as a
// redirection, and an admitted send showed used=2 or, under a limit of
// 1, was answered denied and yet recorded). The decision fails instead, to
// on_error: what it recorded stays, counted once. The same holds for a
// batch send, each recipient counted once.
func TestLostReplyNeverRunsTwice(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	armed := new(atomic.Bool)
	cfg := Config{Addresses: c.Addrs(), Cluster: true, Timeout: 2 * time.Second}
	cfg.dialer = func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &lostReply{Conn: conn, armed: armed}, nil
	}
	client, err := cfg.NewClient()
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	s := New(client, Options{Prefix: "lost:", Timeout: 2 * time.Second})
	defer s.Close()
	ctx := context.Background()
	rule := &limiter.Rule{Name: "twice", By: []string{"recipient"}, Limit: 2, Window: limiter.Window{Duration: time.Minute}}
	usedBy := func(who string) int64 {
		t.Helper()
		return limitertest.MustUsage(t, s, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": who}, rule)).Results[0].Used
	}

	armed.Store(true)
	if d, err := s.Decide(ctx, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": "alice"}, rule)); err == nil {
		t.Errorf("a decision whose reply was lost answered %s; want an error (to on_error)", limitertest.Describe(d))
	}
	if armed.Load() {
		t.Fatal("no script run went out to lose")
	}
	if used := usedBy("alice"); used != 1 {
		t.Errorf("alice: used %d after one send; want 1", used)
	}

	one := &limiter.Rule{Name: "once", By: []string{"recipient"}, Limit: 1, Window: limiter.Window{Duration: time.Minute}}
	armed.Store(true)
	if d, err := s.Decide(ctx, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": "bob"}, one)); err == nil && !d.Allowed {
		t.Errorf("bob: denied, and yet recorded (%s)", limitertest.Describe(d))
	}
	if u := limitertest.MustUsage(t, s, limitertest.Req(time.Time{}, limitertest.Vals{"recipient": "bob"}, one)).Results[0].Used; u != 1 {
		t.Errorf("bob: used %d; want 1", u)
	}

	var reqs []limiter.Request
	for _, who := range []string{"carol", "dave", "erin"} {
		reqs = append(reqs, *limitertest.Req(time.Time{}, limitertest.Vals{"recipient": who}, rule))
	}
	armed.Store(true)
	_, _ = s.DecideBatch(ctx, reqs, limiter.BatchEach)
	for _, who := range []string{"carol", "dave", "erin"} {
		if used := usedBy(who); used > 1 {
			t.Errorf("%s: used %d after one batch entry; want at most 1", who, used)
		}
	}
}
