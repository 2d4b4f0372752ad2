package limiter

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net"
	"sync"
	"time"
)

// pipeConn is one connection to Redis that the store's batch loops share.
// Each loop writes its commands when it has them and does not wait for the
// others' replies; one goroutine reads the replies, in order, and hands each
// request its own. A batch's write then rides in flight beside the next
// batch's read instead of holding its loop for a round trip (go-redis's
// Pipelined waits for its replies before it returns), and Redis reads
// several batches' commands in one wake-up: most of what a round trip costs
// Redis is the wake-up, not the commands (see the README's Performance
// section).
//
// It never sends a command twice. When the connection fails (a write or
// read error, a reply past its request's deadline, a reply that is not
// RESP2) every request not yet answered fails with that error, the
// connection is closed, and the next request dials a new one.
//
// It bypasses the go-redis client's hooks, limiter and pool: metrics and
// circuit breakers hooked into the client do not see this traffic.
type pipeConn struct {
	dial    func(context.Context) (net.Conn, error) // connects and authenticates
	dialTO  time.Duration
	timeout time.Duration // a request's deadline, from when it is sent
	// maxAge, when set, replaces a connection that old (see
	// pipeDialer: Sentinel).
	maxAge time.Duration

	dialMu  sync.Mutex     // one dial at a time; the others wait for its result
	readers sync.WaitGroup // every session's reader goroutine

	mu       sync.Mutex
	sess     *pipeSession // nil until the first request
	closed   bool
	dialErr  error     // the last dial's failure, while it is recent
	dialFail time.Time // when it failed
}

// dialBackoff is how long requests fail at once with the last dial's error
// instead of dialling again. While Redis is unreachable every dial costs up
// to the dial timeout, and the batch loops would queue behind it; failing
// at once lets on_error answer, and the next dial comes soon.
const dialBackoff = 50 * time.Millisecond

// pipeReq is commands sent together and their replies. The sender fills
// cmds, n and done; the reader fills the rest and then calls done, on its
// own goroutine, so done must not block.
type pipeReq struct {
	cmds []byte // encoded commands
	n    int    // how many replies they get
	done func(*pipeReq)

	deadline time.Time
	vals     []respVal // the replies, flattened (see respVal)
	data     []byte    // the replies' strings
	err      error     // the connection failed before every reply came
}

// reset readies the request for new commands, keeping its buffers.
func (r *pipeReq) reset() {
	r.cmds, r.n, r.vals, r.data, r.err = r.cmds[:0], 0, r.vals[:0], r.data[:0], nil
}

// str returns the bytes of the status, error or bulk string v.
func (r *pipeReq) str(v respVal) []byte { return r.data[v.off:v.end:v.end] }

// replyErr returns v as an error when it is an error reply.
func (r *pipeReq) replyErr(v respVal) error {
	if v.kind != '-' {
		return nil
	}
	return fmt.Errorf("%w: %s", ErrStore, r.str(v))
}

// newPipeConn returns a connection that dials when first used. A dial
// takes at most dialTimeout, and never longer than a request may wait.
func newPipeConn(dial func(context.Context) (net.Conn, error), dialTimeout, timeout, maxAge time.Duration) *pipeConn {
	if dialTimeout <= 0 || dialTimeout > timeout {
		dialTimeout = timeout
	}
	return &pipeConn{dial: dial, dialTO: dialTimeout, timeout: timeout, maxAge: maxAge}
}

// send writes req's commands, dialling first when there is no connection.
// req.done is called once, when the replies are in or the connection
// failed; on this goroutine when it could not be sent at all.
func (pc *pipeConn) send(req *pipeReq) {
	for attempt := 0; ; attempt++ {
		s, err := pc.session()
		if err == nil {
			if err = s.send(req, pc.timeout); err == nil {
				return
			}
			// The connection failed or was replaced just now, before req
			// was queued: once, take the next one.
			if attempt == 0 {
				continue
			}
		}
		req.err = err
		req.done(req)
		return
	}
}

// session returns the live connection, dialling one when there is none.
func (pc *pipeConn) session() (*pipeSession, error) {
	if s, err := pc.live(); s != nil || err != nil {
		return s, err
	}
	pc.dialMu.Lock()
	defer pc.dialMu.Unlock()
	if s, err := pc.live(); s != nil || err != nil {
		return s, err // another sender dialled meanwhile, or failed to
	}
	ctx, cancel := context.WithTimeout(context.Background(), pc.dialTO)
	defer cancel()
	conn, err := pc.dial(ctx)
	pc.mu.Lock()
	defer pc.mu.Unlock()
	if err != nil {
		pc.dialErr, pc.dialFail = classify(fmt.Errorf("connecting: %w", err)), time.Now()
		return nil, pc.dialErr
	}
	if pc.closed {
		conn.Close()
		return nil, errStoreClosed
	}
	s := &pipeSession{conn: conn, br: bufio.NewReaderSize(conn, 16<<10), ended: make(chan struct{}), born: time.Now()}
	old := pc.sess
	pc.sess, pc.dialErr = s, nil
	pc.readers.Add(1)
	go func() {
		defer pc.readers.Done()
		s.read()
	}()
	if old != nil {
		old.retire()
	}
	return s, nil
}

// live returns the connection when it is up; an error when pc is closed or
// the last dial failed just now; else nil: dial.
func (pc *pipeConn) live() (*pipeSession, error) {
	pc.mu.Lock()
	defer pc.mu.Unlock()
	switch {
	case pc.closed:
		return nil, errStoreClosed
	case pc.dialErr != nil && time.Since(pc.dialFail) < dialBackoff:
		return nil, pc.dialErr
	case pc.sess == nil || pc.sess.failed():
		return nil, nil
	case pc.maxAge > 0 && time.Since(pc.sess.born) > pc.maxAge:
		return nil, nil
	}
	return pc.sess, nil
}

// close waits up to the request timeout for the requests in flight, then
// closes the connection, and returns when every reader has handed out its
// last reply. Requests sent after close fail.
func (pc *pipeConn) close() {
	pc.mu.Lock()
	pc.closed = true
	s := pc.sess
	pc.mu.Unlock()
	if s != nil {
		deadline := time.Now().Add(pc.timeout)
		for s.inFlight() > 0 && time.Now().Before(deadline) {
			time.Sleep(time.Millisecond) // close is rare; a wait channel would tax every request
		}
		s.broke(errStoreClosed)
	}
	// A replaced connection closes when its last reply is in, or at that
	// request's deadline.
	pc.readers.Wait()
}

// pipeSession is one connection and the requests sent on it.
type pipeSession struct {
	conn  net.Conn
	br    *bufio.Reader
	ended chan struct{} // closed when the reader has returned
	born  time.Time

	mu       sync.Mutex // guards what follows
	out      []byte     // commands not yet written
	spare    []byte     // the buffer being written, for reuse
	flushing bool       // a sender is writing out
	queue    []*pipeReq // sent and not yet answered, in order
	err      error      // why the connection failed (or was closed), once it has
	retiring bool       // replaced: close once the queue is empty
}

var errReplaced = fmt.Errorf("%w: connection replaced", ErrStore)

// retire closes the connection once what is in flight on it is answered.
func (s *pipeSession) retire() {
	s.mu.Lock()
	s.retiring = true
	idle := len(s.queue) == 0 && s.err == nil
	if idle {
		s.err = errReplaced // no request can queue behind the close
	}
	s.mu.Unlock()
	if idle {
		s.conn.Close()
	}
}

func (s *pipeSession) failed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err != nil
}

func (s *pipeSession) inFlight() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.queue)
}

// send queues req and writes out. Whichever sender finds no write under way
// writes everything queued meanwhile too, so concurrent sends share one
// write. It returns the connection's error, without queueing req, when the
// connection has failed; once req is queued the reader answers it.
func (s *pipeSession) send(req *pipeReq, timeout time.Duration) error {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return s.err
	}
	req.deadline = time.Now().Add(timeout)
	if len(s.queue) == 0 {
		// The reader waits on an idle connection without a deadline.
		s.conn.SetReadDeadline(req.deadline)
	}
	s.queue = append(s.queue, req)
	s.out = append(s.out, req.cmds...)
	if s.flushing {
		s.mu.Unlock()
		return nil
	}
	s.flushing = true
	for len(s.out) > 0 {
		buf := s.out
		s.out = s.spare[:0]
		s.mu.Unlock()
		s.conn.SetWriteDeadline(time.Now().Add(timeout))
		_, err := s.conn.Write(buf)
		s.mu.Lock()
		s.spare = buf[:0]
		if err != nil {
			s.flushing = false
			s.mu.Unlock()
			s.broke(err)
			return nil
		}
	}
	s.flushing = false
	s.mu.Unlock()
	return nil
}

// broke records why the connection failed and closes it; the reader then
// fails every request in the queue. Only the reader ends requests, so a
// request is never ended while the reader still fills it.
func (s *pipeSession) broke(err error) {
	s.mu.Lock()
	if s.err == nil {
		s.err = classify(err)
	}
	s.mu.Unlock()
	s.conn.Close()
}

// read reads replies until the connection fails.
func (s *pipeSession) read() {
	defer close(s.ended)
	for {
		// Wait for a reply even with nothing in flight: a connection the
		// server closes while idle is then noticed before a request is
		// sent on it.
		if _, err := s.br.Peek(1); err != nil {
			s.end(err)
			return
		}
		req := s.head()
		if req == nil {
			s.end(fmt.Errorf("%w: a reply nothing asked for", errProtocol))
			return
		}
		for i := 0; i < req.n; i++ {
			var err error
			if req.vals, req.data, err = readReply(s.br, req.vals, req.data, 0); err != nil {
				s.end(err)
				return
			}
			if v := req.vals[len(req.vals)-1]; v.kind == '-' && movesMaster(req.str(v)) {
				// The server is no longer the master (a Sentinel
				// failover): the next request dials the one now named.
				s.broke(req.replyErr(v))
			}
		}
		drained := s.pop()
		req.done(req)
		if drained {
			s.conn.Close() // replaced, and its last reply is in
		}
	}
}

// head returns the oldest request in flight, or nil.
func (s *pipeSession) head() *pipeReq {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.queue) == 0 {
		return nil
	}
	return s.queue[0]
}

// pop removes the answered head, and sets the read deadline to the next
// request's. A head answered in full is handed its replies even when the
// connection failed meanwhile; the requests after it fail. It reports
// whether the connection is replaced and now idle: to be closed.
func (s *pipeSession) pop() (drained bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.queue[0] = nil
	s.queue = s.queue[1:]
	if len(s.queue) > 0 {
		s.conn.SetReadDeadline(s.queue[0].deadline)
		return false
	}
	s.conn.SetReadDeadline(time.Time{})
	if s.retiring && s.err == nil {
		s.err = errReplaced
		return true
	}
	return false
}

// end fails the connection with err (or the error it already failed with)
// and every request in flight.
func (s *pipeSession) end(err error) {
	s.broke(err)
	s.mu.Lock()
	q, err := s.queue, s.err
	s.queue = nil
	s.mu.Unlock()
	for _, req := range q {
		req.err = err
		req.done(req)
	}
}

// movesMaster reports whether an error reply means the server no longer
// takes writes as master.
func movesMaster(msg []byte) bool {
	return bytes.Contains(msg, []byte("READONLY")) || bytes.Contains(msg, []byte("MASTERDOWN"))
}
