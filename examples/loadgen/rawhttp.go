package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"
)

// rawConn is one keep-alive HTTP/1.1 connection that sends a push body and
// reads the answer, and nothing more. The open loop uses it instead of
// net/http's client so that a request leaves on the pacing thread the
// moment it is due: net/http hands each request to a connection's write
// goroutine, which runs when Go's scheduler gets to it.
//
// Its writer (send) and its reader (receive) may be two goroutines, one
// after the other: a request is sent only once the answer to the one
// before has been read.
type rawConn struct {
	addr, path string
	// deadline bounds every dial, read and write: no answer arrives
	// later than this.
	deadline time.Time
	c        net.Conn // nil until dialled, and after a failure
	r        *bufio.Reader
	req      []byte
	close    bool // the last answer said Connection: close
}

// dial connects, unless connected already.
func (rc *rawConn) dial() error {
	if rc.c != nil {
		return nil
	}
	d := net.Dialer{Timeout: 5 * time.Second, Deadline: rc.deadline}
	c, err := d.Dial("tcp", rc.addr)
	if err != nil {
		return err
	}
	c.SetDeadline(rc.deadline)
	rc.c = c
	if rc.r == nil {
		rc.r = bufio.NewReaderSize(c, 4096)
	} else {
		rc.r.Reset(c)
	}
	return nil
}

// send writes a POST of body, dialling first when the connection is new,
// failed or closed by the server.
func (rc *rawConn) send(body []byte) error {
	if err := rc.dial(); err != nil {
		return err
	}
	rc.req = append(rc.req[:0], "POST "...)
	rc.req = append(rc.req, rc.path...)
	rc.req = append(rc.req, " HTTP/1.1\r\nHost: "...)
	rc.req = append(rc.req, rc.addr...)
	rc.req = append(rc.req, "\r\nContent-Type: application/json\r\nContent-Length: "...)
	rc.req = strconv.AppendInt(rc.req, int64(len(body)), 10)
	rc.req = append(rc.req, "\r\n\r\n"...)
	rc.req = append(rc.req, body...)
	if _, err := rc.c.Write(rc.req); err != nil {
		rc.drop()
		return err
	}
	return nil
}

// receive reads one answer, its body discarded, and returns its status.
// After an error, or an answer that closes the connection, the next send
// dials again.
func (rc *rawConn) receive() (int, error) {
	status, err := rc.readAnswer()
	if err != nil || rc.close {
		rc.drop()
	}
	return status, err
}

func (rc *rawConn) drop() {
	if rc.c != nil {
		rc.c.Close()
		rc.c = nil
	}
}

// readAnswer reads the final answer to a POST: interim (1xx) answers are
// skipped. A body that ends only when the connection closes is refused:
// Caddy never sends one to a keep-alive HTTP/1.1 request.
func (rc *rawConn) readAnswer() (int, error) {
	for {
		status, err := rc.readOne()
		if err != nil || status >= 200 {
			return status, err
		}
	}
}

func (rc *rawConn) readOne() (int, error) {
	line, err := rc.r.ReadSlice('\n')
	if err != nil {
		return 0, err
	}
	if len(line) < 12 || !bytes.HasPrefix(line, []byte("HTTP/1.1 ")) {
		return 0, fmt.Errorf("not an HTTP/1.1 status line: %q", line)
	}
	status, err := strconv.Atoi(string(line[9:12]))
	if err != nil || status < 100 {
		return 0, fmt.Errorf("bad status in %q", line)
	}
	length, chunked := -1, false
	rc.close = false
	for {
		h, err := rc.r.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		h = bytes.TrimRight(h, "\r\n")
		if len(h) == 0 {
			break
		}
		name, value, _ := bytes.Cut(h, []byte(":"))
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Length")):
			if length, err = strconv.Atoi(string(value)); err != nil || length < 0 {
				return 0, fmt.Errorf("bad Content-Length %q", value)
			}
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			// chunked, if used, is the last coding applied
			codings := bytes.Split(value, []byte(","))
			chunked = bytes.EqualFold(bytes.TrimSpace(codings[len(codings)-1]), []byte("chunked"))
		case bytes.EqualFold(name, []byte("Connection")):
			for _, opt := range bytes.Split(value, []byte(",")) {
				rc.close = rc.close || bytes.EqualFold(bytes.TrimSpace(opt), []byte("close"))
			}
		}
	}
	switch {
	case status/100 == 1 || status == 204 || status == 304:
		return status, nil // no body, whatever the headers say
	case chunked:
		return status, rc.discardChunks()
	case length >= 0:
		_, err = rc.r.Discard(length)
		return status, err
	}
	return 0, errors.New("an answer with neither Content-Length nor chunks")
}

// discardChunks reads a chunked body to its end.
func (rc *rawConn) discardChunks() error {
	for {
		line, err := rc.r.ReadSlice('\n')
		if err != nil {
			return err
		}
		size, _, _ := bytes.Cut(bytes.TrimRight(line, "\r\n"), []byte(";"))
		n, err := strconv.ParseInt(string(size), 16, 32)
		if err != nil || n < 0 {
			return fmt.Errorf("bad chunk size %q", line)
		}
		if n == 0 { // the last chunk, then trailers up to an empty line
			for {
				t, err := rc.r.ReadSlice('\n')
				if err != nil {
					return err
				}
				if len(bytes.TrimRight(t, "\r\n")) == 0 {
					return nil
				}
			}
		}
		if _, err := rc.r.Discard(int(n) + 2); err != nil { // the chunk and its CRLF
			return err
		}
	}
}
