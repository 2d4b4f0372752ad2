package limiter

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"time"

	"github.com/redis/go-redis/v9"
)

// sentinelMaxAge is how long a pipeConn to a master that Sentinel names
// is kept. go-redis learns of a failover from the sentinels and drops its
// own pools, not this connection; a write the old master refuses (READONLY)
// drops it at once, but reads, and writes to an old master cut off from the
// sentinels, do not. Dialling again asks the sentinels for the master.
const sentinelMaxAge = time.Second

// pipeDialer returns how pipeConn connects to the server client talks to:
// through the client's own dialer (TLS and, with Sentinel, asking the
// sentinels for the master included), then AUTH, SELECT and CLIENT SETNAME
// as the client's options say; and how long a connection may be kept (0:
// for ever). ok is false for clients it cannot stand in for: a cluster or
// ring (keys live on several servers), or credentials that come from a
// provider or hooks run on connect.
func pipeDialer(client redis.UniversalClient) (dial func(context.Context) (net.Conn, error), dialTimeout, maxAge time.Duration, ok bool) {
	c, isClient := client.(*redis.Client)
	if !isClient {
		return nil, 0, 0, false
	}
	o := c.Options()
	if o.Dialer == nil || o.OnConnect != nil || o.CredentialsProvider != nil ||
		o.CredentialsProviderContext != nil || o.StreamingCredentialsProvider != nil {
		return nil, 0, 0, false
	}
	if o.Addr == "FailoverClient" { // go-redis's name for a Sentinel client's options
		maxAge = sentinelMaxAge
	}
	var hello []byte
	n := 0
	if o.Password != "" {
		if o.Username != "" {
			hello = appendArray(hello, 3)
			hello = appendBulkString(hello, "AUTH")
			hello = appendBulkString(hello, o.Username)
		} else {
			hello = appendArray(hello, 2)
			hello = appendBulkString(hello, "AUTH")
		}
		hello = appendBulkString(hello, o.Password)
		n++
	}
	if o.DB != 0 {
		hello = appendArray(hello, 2)
		hello = appendBulkString(hello, "SELECT")
		hello = appendBulkInt(hello, int64(o.DB))
		n++
	}
	if o.ClientName != "" {
		hello = appendArray(hello, 3)
		hello = appendBulkString(hello, "CLIENT")
		hello = appendBulkString(hello, "SETNAME")
		hello = appendBulkString(hello, o.ClientName)
		n++
	}
	dial = func(ctx context.Context) (net.Conn, error) {
		conn, err := o.Dialer(ctx, o.Network, o.Addr)
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return conn, nil
		}
		if err := handshake(ctx, conn, hello, n); err != nil {
			conn.Close()
			return nil, err
		}
		return conn, nil
	}
	return dial, o.DialTimeout, maxAge, true
}

// handshake sends cmds on a new connection and checks their n replies.
// Nothing else is in flight, so the reader may buffer past them.
func handshake(ctx context.Context, conn net.Conn, cmds []byte, n int) error {
	if d, ok := ctx.Deadline(); ok {
		conn.SetDeadline(d)
		defer conn.SetDeadline(time.Time{})
	}
	if _, err := conn.Write(cmds); err != nil {
		return err
	}
	req := &pipeReq{}
	br := bufio.NewReaderSize(conn, 512)
	for i := 0; i < n; i++ {
		var err error
		if req.vals, req.data, err = readReply(br, req.vals, req.data, 0); err != nil {
			return err
		}
		if v := req.vals[len(req.vals)-1]; v.kind == '-' {
			return fmt.Errorf("connection set-up: %s", req.str(v))
		}
	}
	return nil
}
