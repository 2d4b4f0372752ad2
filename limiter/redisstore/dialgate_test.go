package redisstore

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/redis/go-redis/v9"
)

// gateClock is a clock the test moves.
type gateClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *gateClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *gateClock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// countingDialer dials TCP and counts the dials.
func countingDialer(n *atomic.Int64) func(context.Context, string, string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		n.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, network, addr)
	}
}

// TestDialGateRecoversAtOnce proves that a client whose server refused
// many more dials than its pool size decides again with the first command
// after the server is back and probeEvery has passed (go-redis's own
// breaker would refuse for up to a second more), that while the server is
// down commands fail at once without dialling, bar one probe every
// probeEvery, and that those failures read as unreachable.
func TestDialGateRecoversAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	clock := &gateClock{t: time.Unix(1_800_000_000, 0)}
	var dials atomic.Int64
	opt := &redis.Options{Addr: srv.Addr, PoolSize: 2, Dialer: countingDialer(&dials)}
	opt.MaxRetries, opt.DialerRetries, opt.DialerRetryTimeout = failFast()
	client := gateClient(redis.NewClient(opt), clock.now)
	defer client.Close()
	ctx := context.Background()
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatalf("PING before the fault: %v", err)
	}

	srv.Stop()
	before := dials.Load()
	for i := 0; i < 50; i++ {
		err := client.Ping(ctx).Err()
		if err == nil {
			t.Fatalf("PING %d succeeded with the server down", i)
		}
		if r := Reason(err); r != ReasonUnreachable {
			t.Fatalf("PING %d failed with %v, reason %q, not %q", i, err, r, ReasonUnreachable)
		}
		// The message is the dial's, as when go-redis's pool dialled.
		if !strings.HasPrefix(err.Error(), "dial tcp "+srv.Addr+": ") {
			t.Fatalf("PING %d failed with %q, not the dial's error", i, err)
		}
	}
	// The first PING meets its pooled connection closed, the second
	// dials and fails; from then on only a probe dials, every probeEvery.
	if n := dials.Load() - before; n > 2 {
		t.Errorf("%d dials for 50 commands within probeEvery of a failed dial, want at most 2", n)
	}
	for i := 0; i < 25; i++ {
		clock.add(probeEvery)
		if client.Ping(ctx).Err() == nil {
			t.Fatal("PING succeeded with the server down")
		}
	}
	if n := dials.Load() - before; n > 2+25 {
		t.Errorf("%d dials for 25 probes, want one a probe", n)
	}

	srv.Restart(t)
	clock.add(probeEvery)
	if err := client.Ping(ctx).Err(); err != nil {
		t.Fatalf("the first PING after the server was back and probeEvery passed: %v", err)
	}
	for i := 0; i < 20; i++ {
		if err := client.Ping(ctx).Err(); err != nil {
			t.Fatalf("PING %d after recovery: %v", i, err)
		}
	}
}

// TestDialGateIgnoresTheCallersDeadline proves that a dial that failed
// because its caller's time ran out leaves the gate open (under load a
// dial may outlast a decision's deadline with the server up), while one
// that failed in time shuts it until probeEvery has passed.
func TestDialGateIgnoresTheCallersDeadline(t *testing.T) {
	clock := &gateClock{t: time.Unix(1_800_000_000, 0)}
	g := newDialGate(clock.now)
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	dial := g.DialHook(func(ctx context.Context, network, addr string) (net.Conn, error) {
		if err := ctx.Err(); err != nil {
			return nil, &net.OpError{Op: "dial", Net: network, Err: err}
		}
		return nil, refused
	})

	late, cancel := context.WithCancel(context.Background())
	cancel()
	conn, err := dial(late, "tcp", "127.0.0.1:1")
	if err != nil {
		t.Fatalf("the gate handed the pool an error: %v", err)
	}
	if _, err := conn.Write([]byte("PING")); err == nil {
		t.Fatal("a failed dial's connection took a write")
	}
	if err := g.shut(); err != nil {
		t.Fatalf("a dial cut short by its caller shut the gate: %v", err)
	}

	if _, err := dial(context.Background(), "tcp", "127.0.0.1:1"); err != nil {
		t.Fatalf("the gate handed the pool an error: %v", err)
	}
	if err := g.shut(); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("after a refused dial the gate let a command through (%v)", err)
	}
	clock.add(probeEvery)
	if err := g.shut(); err != nil {
		t.Fatalf("probeEvery after the refused dial the gate still shut: %v", err)
	}
}
