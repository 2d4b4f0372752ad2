package limiter

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strconv"
)

// This file is the little of the Redis protocol (RESP2) that pipeConn
// speaks: commands are arrays of bulk strings, written straight from the
// batch's bytes; replies are read into a request's own buffers, so a batch
// allocates nothing per key.

// appendArray appends the header of a command of n arguments.
func appendArray(b []byte, n int) []byte {
	b = append(b, '*')
	b = strconv.AppendInt(b, int64(n), 10)
	return append(b, '\r', '\n')
}

// appendBulk appends one argument.
func appendBulk(b, arg []byte) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(arg)), 10)
	b = append(b, '\r', '\n')
	b = append(b, arg...)
	return append(b, '\r', '\n')
}

// appendBulkString appends one argument.
func appendBulkString(b []byte, arg string) []byte {
	b = append(b, '$')
	b = strconv.AppendInt(b, int64(len(arg)), 10)
	b = append(b, '\r', '\n')
	b = append(b, arg...)
	return append(b, '\r', '\n')
}

// appendBulkInt appends one argument, a number in decimal.
func appendBulkInt(b []byte, v int64) []byte {
	var num [20]byte
	return appendBulk(b, strconv.AppendInt(num[:0], v, 10))
}

// respVal is one reply, or one element of an array reply. An array is
// followed, in a request's vals, by its elements.
type respVal struct {
	kind byte  // '+' status, '-' error, ':' integer, '$' bulk, '*' array, 0 nil
	n    int64 // the integer; an array's length
	// The bytes of a status, error or bulk string: data[off:end] of the
	// request that read it.
	off, end int
}

// maxBulk is the longest bulk string Redis sends (proto-max-bulk-len).
const maxBulk = 512 << 20

// maxDepth bounds nested arrays: the replies pipeConn reads nest one deep.
const maxDepth = 4

// errProtocol marks a reply that is not RESP2: the connection is out of
// step and must be dropped.
var errProtocol = errors.New("redis protocol error")

// readReply reads one reply from br, appending it to vals and its strings
// to data.
func readReply(br *bufio.Reader, vals []respVal, data []byte, depth int) ([]respVal, []byte, error) {
	line, err := br.ReadSlice('\n')
	if err != nil {
		if errors.Is(err, bufio.ErrBufferFull) {
			err = fmt.Errorf("%w: reply line longer than %d bytes", errProtocol, br.Size())
		}
		return vals, data, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return vals, data, fmt.Errorf("%w: malformed line %q", errProtocol, line)
	}
	kind, body := line[0], line[1:len(line)-2]
	switch kind {
	case '+', '-':
		off := len(data)
		data = append(data, body...)
		return append(vals, respVal{kind: kind, off: off, end: len(data)}), data, nil
	case ':':
		n, err := strconv.ParseInt(string(body), 10, 64)
		if err != nil {
			return vals, data, fmt.Errorf("%w: integer %q", errProtocol, body)
		}
		return append(vals, respVal{kind: ':', n: n}), data, nil
	case '$':
		n, err := strconv.ParseInt(string(body), 10, 64)
		switch {
		case err != nil || n < -1 || n > maxBulk:
			return vals, data, fmt.Errorf("%w: bulk length %q", errProtocol, body)
		case n == -1:
			return append(vals, respVal{}), data, nil
		}
		off := len(data)
		data = append(data, make([]byte, n+2)...)
		if _, err := io.ReadFull(br, data[off:]); err != nil {
			return vals, data, err
		}
		if data[len(data)-2] != '\r' || data[len(data)-1] != '\n' {
			return vals, data, fmt.Errorf("%w: bulk string not ended by CRLF", errProtocol)
		}
		data = data[:len(data)-2]
		return append(vals, respVal{kind: '$', off: off, end: len(data)}), data, nil
	case '*':
		n, err := strconv.ParseInt(string(body), 10, 64)
		switch {
		case err != nil || n < -1 || n > maxBulk:
			return vals, data, fmt.Errorf("%w: array length %q", errProtocol, body)
		case n == -1:
			return append(vals, respVal{}), data, nil
		case depth >= maxDepth:
			return vals, data, fmt.Errorf("%w: arrays nested past %d", errProtocol, maxDepth)
		}
		vals = append(vals, respVal{kind: '*', n: n})
		for i := int64(0); i < n; i++ {
			if vals, data, err = readReply(br, vals, data, depth+1); err != nil {
				return vals, data, err
			}
		}
		return vals, data, nil
	}
	return vals, data, fmt.Errorf("%w: unknown reply type %q", errProtocol, kind)
}

// skip returns the index after the value at i and, for an array, its
// elements.
func skip(vals []respVal, i int) int {
	if vals[i].kind != '*' {
		return i + 1
	}
	n := vals[i].n
	i++
	for ; n > 0; n-- {
		i = skip(vals, i)
	}
	return i
}
