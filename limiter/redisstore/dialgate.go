package redisstore

import (
	"context"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// This file keeps a Redis that is back from being refused for up to a
// second more. A go-redis pool counts its failed dials and, once PoolSize
// of them have failed since its breaker last closed (over the process's
// life, not in a row), fails every new connection with the last dial error
// until a background dial, tried once a second, works (go-redis issue
// 3062). For a gateway that was up to a second of decisions sent to
// on_error after Redis restarted, and under load, where a dial now and
// then runs out of its caller's time, the breaker opened with Redis up:
// TestFaults saw 735 decisions fail at once after the store had recovered.
//
// dialGate takes the breaker's place, one per go-redis client (one pool:
// a server, a cluster node, or Sentinel's current master). It hands the
// pool no dial error, so the pool's breaker never opens: a failed dial
// becomes a connection whose first write fails with the dial's error,
// which the pool takes as dialled and drops. While the server refuses
// connections it fails commands at once, before they take a connection
// (a dropped connection still costs its buffers), and lets one command
// through every probeEvery to dial again: a server that is back is
// dialled within probeEvery.

// probeEvery is how often a gate lets a command dial a server whose last
// dial failed. A refused dial takes microseconds: without a pause each
// command would be a dial of its own.
const probeEvery = 10 * time.Millisecond

// dialGate is a redis.Hook; see above.
type dialGate struct {
	now func() time.Time
	// failing is set while the last dial failed: the fast path of every
	// command reads only it.
	failing atomic.Bool

	mu sync.Mutex
	// err is the failed dial's error, failedAt when it failed.
	err      error
	failedAt time.Time
	// probing: a dial of a failing server is under way.
	probing bool
}

// newDialGate returns a gate that reads the time from now.
func newDialGate(now func() time.Time) *dialGate { return &dialGate{now: now} }

// gateClient adds a gate of its own to a go-redis client.
func gateClient(c redis.UniversalClient, now func() time.Time) redis.UniversalClient {
	c.AddHook(newDialGate(now))
	return c
}

// shut returns the error a command fails with at once, or nil to let it
// go on: it fails while the server's last dial failed, until probeEvery
// has passed and no dial is under way.
func (g *dialGate) shut() error {
	if !g.failing.Load() {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.refusing() {
		return g.err
	}
	return nil
}

// refusing reports, with mu held, whether the gate fails commands and
// dials at once: the last dial failed, and a probe is under way or
// probeEvery has not passed.
func (g *dialGate) refusing() bool {
	return g.err != nil && (g.probing || g.now().Sub(g.failedAt) < probeEvery)
}

// claim decides whether a dial may go ahead, and whether it is the probe of
// a failing server; when it may not, it returns the error to fail with.
func (g *dialGate) claim() (probe bool, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case g.err == nil:
		return false, nil
	case g.refusing():
		return false, g.err
	}
	g.probing = true
	return true, nil
}

// settle records a dial's outcome. A dial that failed because its caller's
// time ran out says nothing of the server (under load a dial can wait past
// a decision's deadline): it neither opens the gate nor, unless it was the
// probe, closes it.
func (g *dialGate) settle(ctx context.Context, probe bool, err error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if probe {
		g.probing = false
	}
	switch {
	case err == nil:
		g.err = nil
		g.failing.Store(false)
	case ctx.Err() != nil && !probe:
	default:
		g.err, g.failedAt = &connectionNeverMade{err}, g.now()
		g.failing.Store(true)
	}
}

// DialHook dials through the gate; it never returns an error (see above).
func (g *dialGate) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		probe, err := g.claim()
		if err != nil {
			return &failedConn{err: err, network: network, addr: addr}, nil
		}
		conn, err := next(ctx, network, addr)
		g.settle(ctx, probe, err)
		if err != nil {
			return &failedConn{err: &connectionNeverMade{err}, network: network, addr: addr}, nil
		}
		return conn, nil
	}
}

// ProcessHook fails a command at once while the gate is shut.
func (g *dialGate) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if err := g.shut(); err != nil {
			cmd.SetErr(err)
			return err
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook fails a pipeline at once while the gate is shut.
func (g *dialGate) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if err := g.shut(); err != nil {
			for _, cmd := range cmds {
				cmd.SetErr(err)
			}
			return err
		}
		return next(ctx, cmds)
	}
}

// failedConn is a dial that failed, as a connection: every read and write
// fails with the dial's error (a connectionNeverMade).
type failedConn struct {
	err           error
	network, addr string
}

func (c *failedConn) Read([]byte) (int, error)  { return 0, c.err }
func (c *failedConn) Write([]byte) (int, error) { return 0, c.err }

func (c *failedConn) Close() error                     { return nil }
func (c *failedConn) LocalAddr() net.Addr              { return failedAddr{c.network, ""} }
func (c *failedConn) RemoteAddr() net.Addr             { return failedAddr{c.network, c.addr} }
func (c *failedConn) SetDeadline(time.Time) error      { return nil }
func (c *failedConn) SetReadDeadline(time.Time) error  { return nil }
func (c *failedConn) SetWriteDeadline(time.Time) error { return nil }

type failedAddr struct{ network, addr string }

func (a failedAddr) Network() string { return a.network }
func (a failedAddr) String() string  { return a.addr }

// connectionNeverMade is a failed dial's error as the gate passes it on,
// from a failedConn or a command failed at once. Its Unwrap returns a
// list: go-redis unwraps the error of a new connection's handshake (which
// runs through the gate's hooks too) with errors.Unwrap, which follows
// only a single error, so the caller keeps the dial's whole message
// (dial tcp ...: connection refused, not "connect: connection refused"),
// while errors.Is, errors.As and the store's own walk of an error's tree
// (serverErrors) follow the list.
type connectionNeverMade struct{ err error }

func (e *connectionNeverMade) Error() string   { return e.err.Error() }
func (e *connectionNeverMade) Unwrap() []error { return []error{e.err} }
