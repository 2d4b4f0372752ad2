package h2scheme

import (
	"bufio"
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
	"golang.org/x/net/http2/hpack"
)

// Options bound what one connection may cost. The zero value takes every
// default.
type Options struct {
	// HandshakeTimeout bounds the TLS handshake, which the first Read
	// performs. Default: 10 s.
	HandshakeTimeout time.Duration

	// MaxHeaderListSize bounds one header block: its decoded header list
	// in HPACK's measure (each field's name and value plus 32 bytes), and
	// the raw bytes of its HEADERS and CONTINUATION frames, frame headers
	// included. A connection that sends a larger block is closed. Default:
	// DefaultMaxHeaderListSize, above what Caddy's server accepts by
	// default, so that the server itself answers the sizes it refuses
	// (431). The wrapper holds a block whole before the server sees it, so
	// this is what one connection may make it hold.
	MaxHeaderListSize int

	// SeesTLS, when set, is called when a connection that is no
	// *tls.Conn opens with a TLS handshake record: the wrapper sits
	// before the TLS listener (listener_wrappers { h2_scheme tls }), sees
	// encrypted bytes, and so fixes nothing. The connection passes
	// untouched either way.
	SeesTLS func()
}

// tlsHandshakeRecord is the first byte of a TLS handshake record (a
// ClientHello): no HTTP/1 method and not the HTTP/2 preface's "P".
const tlsHandshakeRecord = 0x16

// DefaultMaxHeaderListSize is twice Caddy's default max_header_size (16
// KiB, which its HTTP/2 server takes as its header-list limit, plus 32
// bytes for ten fields). Go's own default is 1 MiB: a wrapper bounded
// there let a connection make it hold 2.2 MB where Caddy's server, bounded
// at 16 KiB, closed it at 33 KB.
const DefaultMaxHeaderListSize = 2*16<<10 + 320

// maxFrameSize is the largest frame Go's HTTP/2 server reads (its
// MaxReadFrameSize default, which Caddy keeps): a larger one ends the
// connection (FRAME_SIZE_ERROR), even in a block the wrapper would
// rewrite into smaller frames.
const maxFrameSize = 1 << 20

const defaultHandshakeTimeout = 10 * time.Second

func (o Options) withDefaults() Options {
	if o.HandshakeTimeout <= 0 {
		o.HandshakeTimeout = defaultHandshakeTimeout
	}
	if o.MaxHeaderListSize <= 0 {
		o.MaxHeaderListSize = DefaultMaxHeaderListSize
	}
	return o
}

// The HTTP/2 wire constants the wrapper reads and writes (RFC 9113 §4, §6).
const (
	frameHeaderLen = 9
	// maxFragment is the largest frame payload the wrapper writes: the
	// smallest SETTINGS_MAX_FRAME_SIZE a server may announce, so any
	// server accepts it.
	maxFragment = 16384
	// tableSize is the dynamic table size Go's server announces
	// (SETTINGS_HEADER_TABLE_SIZE, its MaxDecoderHeaderTableSize default):
	// the most a client's encoder may use.
	tableSize = 4096

	typeHeaders      = 0x1
	typePushPromise  = 0x5
	typeGoAway       = 0x7
	typeContinuation = 0x9

	flagEndStream  = 0x1
	flagEndHeaders = 0x4
	flagPadded     = 0x8
	flagPriority   = 0x20

	codeInadequateSecurity = 0xc
)

// clientPreface opens every HTTP/2 connection (RFC 9113 §3.4).
const clientPreface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// step is where a connection's reading stands.
type step int

const (
	stepHandshake   step = iota // the TLS handshake is still to be done
	stepPreface                 // matching the client preface
	stepFrames                  // an HTTP/2 connection: reading frames
	stepPassthrough             // not HTTP/2: bytes pass untouched
)

// Conn hands the server a client's byte stream with every `:scheme` of
// "https:" or "http:" written as "https" or "http". It reads on one
// goroutine at a time, as net/http and x/net's HTTP/2 server do; Write,
// Close and the deadlines go straight to the wrapped connection.
type Conn struct {
	net.Conn
	tls  *tls.Conn // the same connection when it is TLS, else nil
	opts Options
	br   *bufio.Reader

	step    step
	preface int    // bytes of the client preface matched so far
	out     []byte // bytes ready for the server, from off on
	off     int
	rem     int // payload bytes of a frame passed as it is, still to read
	err     error

	dec   *hpack.Decoder
	block headerBlock
	// frag and fixed hold a block with a scheme to fix: its fragments
	// together, then as the server gets them.
	frag, transcoded []byte
	// undecoded is the stream of a header block that passes undecoded:
	// its HEADERS frame is one x/net refuses unread (see readHeaders).
	undecoded uint32
	hdr       [frameHeaderLen]byte
}

// headerBlock is the header block being read: a HEADERS frame and the
// CONTINUATION frames after it.
type headerBlock struct {
	active bool
	stream uint32
	flags  byte    // the HEADERS frame's END_STREAM and PRIORITY
	prio   [5]byte // its priority fields, when PRIORITY is set
	raw    []byte  // the frames as received
	fields []hpack.HeaderField
	size   int      // the decoded list so far, in HPACK's measure
	tooBig bool     // size passed the limit
	frags  [][2]int // each fragment's start and end in raw
	fixed  []int    // the fields whose scheme was fixed, by number
	// checked is how many of fields hasInvalidField has checked;
	// sawRegular says one of them was not a pseudo-header, invalid that
	// one was a field Go's server refuses the stream for.
	checked             int
	invalid, sawRegular bool
}

// hasInvalidField reports whether a field decoded so far is one x/net
// refuses (validField), checking those not checked yet.
func (b *headerBlock) hasInvalidField() bool {
	for ; !b.invalid && b.checked < len(b.fields); b.checked++ {
		b.invalid = !validField(b.fields[b.checked], &b.sawRegular)
	}
	return b.invalid
}

// Wrap returns c reading as a Conn. A *tls.Conn comes back as a *TLSConn,
// which reports its ConnectionState (Caddy sets r.TLS from it).
func Wrap(c net.Conn, opts Options) net.Conn {
	w := newConn(c, opts)
	if w.tls != nil {
		return &TLSConn{w}
	}
	return w
}

func newConn(c net.Conn, opts Options) *Conn {
	w := &Conn{Conn: c, opts: opts.withDefaults(), step: stepPreface}
	if tc, ok := c.(*tls.Conn); ok {
		w.tls, w.step = tc, stepHandshake
	}
	w.br = bufio.NewReaderSize(c, 16<<10)
	return w
}

// TLSConn is a Conn over TLS.
type TLSConn struct{ *Conn }

// ConnectionState is the TLS connection's.
func (c *TLSConn) ConnectionState() tls.ConnectionState { return c.tls.ConnectionState() }

// Read hands out the next bytes of the stream the server should see.
func (c *Conn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	for {
		if c.off < len(c.out) {
			n := copy(p, c.out[c.off:])
			c.off += n
			if c.off == len(c.out) {
				c.out, c.off = c.out[:0], 0
			}
			return n, nil
		}
		if c.err != nil {
			return 0, c.err
		}
		switch c.step {
		case stepHandshake:
			c.err = c.handshake()
		case stepPreface:
			c.err = c.readPreface()
		case stepPassthrough:
			if c.br.Buffered() > 0 {
				return c.br.Read(p)
			}
			return c.Conn.Read(p)
		case stepFrames:
			if c.rem > 0 {
				n, err := c.br.Read(p[:min(len(p), c.rem)])
				c.rem -= n
				return n, err
			}
			c.err = c.readFrame()
		}
	}
}

// readPreface reads what has come of the first 24 bytes and passes it on:
// the client preface makes the connection HTTP/2, anything else leaves it
// untouched.
func (c *Conn) readPreface() error {
	var buf [len(clientPreface)]byte
	n, err := c.br.Read(buf[:len(clientPreface)-c.preface])
	c.out = append(c.out, buf[:n]...)
	if !bytes.Equal(buf[:n], []byte(clientPreface[c.preface:c.preface+n])) {
		if c.tls == nil && c.preface == 0 && n > 0 && buf[0] == tlsHandshakeRecord && c.opts.SeesTLS != nil {
			c.opts.SeesTLS()
		}
		if c.tls != nil && c.tls.ConnectionState().NegotiatedProtocol == "h2" {
			// Go's server speaks HTTP/2 alone where ALPN chose it, and
			// ends a connection that does not: a wrapped connection,
			// not a *tls.Conn to net/http, would be served as HTTP/1.
			return errors.New("h2scheme: a TLS connection that negotiated h2 sent no HTTP/2 client preface")
		}
		c.step = stepPassthrough
		return err
	}
	c.preface += n
	if c.preface == len(clientPreface) {
		if c.tls != nil && c.tls.ConnectionState().NegotiatedProtocol != "h2" {
			// Go's server answers HTTP/2 over TLS only where ALPN chose it.
			return errors.New("h2scheme: HTTP/2 client preface on a TLS connection that did not negotiate h2")
		}
		c.step = stepFrames
		c.dec = hpack.NewDecoder(tableSize, c.emit)
		c.dec.SetMaxStringLength(c.opts.MaxHeaderListSize)
	}
	return err
}

// readFrame reads one frame header, and a header block's frames whole;
// every other frame's payload is then read straight through (c.rem).
func (c *Conn) readFrame() error {
	if _, err := io.ReadFull(c.br, c.hdr[:]); err != nil {
		return err
	}
	length := int(c.hdr[0])<<16 | int(c.hdr[1])<<8 | int(c.hdr[2])
	typ, flags := c.hdr[3], c.hdr[4]
	stream := binary.BigEndian.Uint32(c.hdr[5:]) & (1<<31 - 1)
	if c.undecoded != 0 {
		if typ != typeContinuation || stream != c.undecoded {
			return protocolError("frame of type %#x inside a header block (CONTINUATION expected)", typ)
		}
		if flags&flagEndHeaders != 0 {
			c.undecoded = 0
		}
		c.out = append(c.out, c.hdr[:]...)
		c.rem = length
		return nil
	}
	if c.block.active && typ != typeContinuation {
		return protocolError("frame of type %#x inside a header block (CONTINUATION expected)", typ)
	}
	switch typ {
	case typeHeaders:
		return c.readHeaders(length, flags, stream)
	case typeContinuation:
		return c.readContinuation(length, flags, stream)
	case typePushPromise:
		// A client must not push; Go's server ends the connection.
		return protocolError("PUSH_PROMISE from a client")
	}
	c.out = append(c.out, c.hdr[:]...)
	c.rem = length
	return nil
}

func (c *Conn) readHeaders(length int, flags byte, stream uint32) error {
	if stream == 0 {
		return protocolError("HEADERS on stream 0")
	}
	payload, err := c.readBlockFrame(length)
	if err != nil {
		return err
	}
	var padLen int
	if flags&flagPadded != 0 {
		if len(payload) < 1 {
			return protocolError("HEADERS too short for its pad length")
		}
		padLen, payload = int(payload[0]), payload[1:]
	}
	b := &c.block
	b.active, b.stream, b.flags = true, stream, flags&(flagEndStream|flagPriority)
	if flags&flagPriority != 0 {
		if len(payload) < 5 {
			return protocolError("HEADERS too short for its priority")
		}
		copy(b.prio[:], payload[:5])
		payload = payload[5:]
	}
	if padLen > len(payload) {
		// x/net resets the stream for this without decoding the block,
		// and reads on: so does the server, handed the frame as it came.
		// Its CONTINUATION frames go the same way.
		b.active = false
		c.out = append(c.out, b.raw...)
		if flags&flagEndHeaders == 0 {
			c.undecoded = stream
		}
		return nil
	}
	return c.decode(payload[:len(payload)-padLen], flags)
}

func (c *Conn) readContinuation(length int, flags byte, stream uint32) error {
	if !c.block.active {
		return protocolError("CONTINUATION outside a header block")
	}
	if stream != c.block.stream {
		return protocolError("CONTINUATION for stream %d inside stream %d's header block", stream, c.block.stream)
	}
	if c.block.hasInvalidField() {
		// x/net refuses the stream for an invalid field and ends the
		// connection at a CONTINUATION frame after one; the fields are
		// checked only here, as most blocks have no CONTINUATION. (The
		// server checks every field itself.)
		return protocolError("CONTINUATION after an invalid header field")
	}
	payload, err := c.readBlockFrame(length)
	if err != nil {
		return err
	}
	return c.decode(payload, flags)
}

// readBlockFrame appends the frame (its header, then its payload) to the
// block's raw bytes, within the block's bound, and returns the payload.
func (c *Conn) readBlockFrame(length int) ([]byte, error) {
	b := &c.block
	if !b.active {
		b.raw = b.raw[:0]
	}
	start := len(b.raw) + frameHeaderLen
	if length > maxFrameSize {
		return nil, protocolError("a frame of %d bytes, over the %d the server reads", length, maxFrameSize)
	}
	if start+length > c.opts.MaxHeaderListSize {
		return nil, fmt.Errorf("%w: its frames pass %d bytes", errBlockTooLarge, c.opts.MaxHeaderListSize)
	}
	b.raw = slices.Grow(b.raw, frameHeaderLen+length)
	b.raw = append(b.raw, c.hdr[:]...)
	b.raw = b.raw[:start+length]
	if _, err := io.ReadFull(c.br, b.raw[start:]); err != nil {
		return nil, err
	}
	return b.raw[start:], nil
}

// decode decodes one fragment of the block, and hands out the block when
// the fragment ends it.
func (c *Conn) decode(frag []byte, flags byte) error {
	// frag lies in the block's raw bytes: its capacity says where.
	at := cap(c.block.raw) - cap(frag)
	c.block.frags = append(c.block.frags, [2]int{at, at + len(frag)})
	_, err := c.dec.Write(frag)
	if c.block.tooBig || errors.Is(err, hpack.ErrStringLength) {
		return fmt.Errorf("%w: its header list passes %d bytes", errBlockTooLarge, c.opts.MaxHeaderListSize)
	}
	if err != nil {
		return fmt.Errorf("h2scheme: %w", err)
	}
	if flags&flagEndHeaders == 0 {
		return nil
	}
	if err := c.dec.Close(); err != nil {
		return fmt.Errorf("h2scheme: %w", err)
	}
	return c.finishBlock()
}

// emit takes each decoded field of the block.
func (c *Conn) emit(f hpack.HeaderField) {
	b := &c.block
	b.size += int(f.Size())
	if b.size > c.opts.MaxHeaderListSize {
		b.tooBig = true
		c.dec.SetEmitEnabled(false)
		return
	}
	if f.Name == ":scheme" {
		if v, ok := fixedScheme(f.Value); ok {
			f.Value = v
			b.fixed = append(b.fixed, len(b.fields))
		}
	}
	b.fields = append(b.fields, f)
}

// validField applies x/net's checks of a decoded field (its
// readMetaFrame): a valid value, a lowercase token for a name, and no
// pseudo-header after a regular field.
func validField(f hpack.HeaderField, sawRegular *bool) bool {
	if !httpguts.ValidHeaderFieldValue(f.Value) {
		return false
	}
	if strings.HasPrefix(f.Name, ":") {
		return !*sawRegular
	}
	*sawRegular = true
	if !httpguts.ValidHeaderFieldName(f.Name) {
		return false
	}
	for i := 0; i < len(f.Name); i++ {
		if 'A' <= f.Name[i] && f.Name[i] <= 'Z' {
			return false
		}
	}
	return true
}

// fixedScheme is the scheme a client meant by "https:" or "http:".
func fixedScheme(v string) (string, bool) {
	switch v {
	case "https:":
		return "https", true
	case "http:":
		return "http", true
	}
	return "", false
}

// finishBlock hands out a whole block: as received, or, when a scheme
// was fixed, transcoded (see transcode) into new frames.
func (c *Conn) finishBlock() error {
	b := &c.block
	if len(b.fixed) == 0 {
		if len(c.out) == 0 {
			c.out, b.raw = b.raw, c.out[:0]
		} else {
			c.out = append(c.out, b.raw...)
		}
	} else {
		c.frag = c.frag[:0]
		for _, f := range b.frags {
			c.frag = append(c.frag, b.raw[f[0]:f[1]]...)
		}
		var err error
		if c.transcoded, err = transcode(c.transcoded[:0], c.frag, b.fields, b.fixed); err != nil {
			return err
		}
		c.appendFrames(c.transcoded)
	}
	clear(b.fields)
	b.fields, b.fixed, b.frags, b.size, b.active = b.fields[:0], b.fixed[:0], b.frags[:0], 0, false
	b.checked, b.invalid, b.sawRegular = 0, false, false
	c.dec.SetEmitEnabled(true)
	return nil
}

// appendFrames writes a transcoded block as a HEADERS frame (keeping the
// client's END_STREAM and priority, dropping its padding) and as many
// CONTINUATION frames as it needs.
func (c *Conn) appendFrames(block []byte) {
	b := &c.block
	typ, flags := byte(typeHeaders), b.flags
	var prefix []byte
	if flags&flagPriority != 0 {
		prefix = b.prio[:]
	}
	for {
		n := min(len(block), maxFragment-len(prefix))
		f := flags
		if n == len(block) {
			f |= flagEndHeaders
		}
		size := len(prefix) + n
		c.out = append(c.out, byte(size>>16), byte(size>>8), byte(size), typ, f)
		c.out = binary.BigEndian.AppendUint32(c.out, b.stream)
		c.out = append(c.out, prefix...)
		c.out = append(c.out, block[:n]...)
		block = block[n:]
		if len(block) == 0 {
			return
		}
		typ, flags, prefix = typeContinuation, 0, nil
	}
}

// errBlockTooLarge ends a connection whose header block passes the bound.
var errBlockTooLarge = errors.New("h2scheme: header block too large")

// protocolError is a connection error of the client's making: Go's server
// would end the connection for it too.
func protocolError(format string, args ...any) error {
	return fmt.Errorf("h2scheme: protocol error: "+format, args...)
}
