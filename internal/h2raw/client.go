// Package h2raw is an HTTP/2 client for tests that writes frames and
// HPACK blocks as a test chooses: `:scheme: https:` as firebase-admin for
// Node writes it, blocks split into CONTINUATION frames, table size
// changes. Go's own client would never write these.
package h2raw

import (
	"bytes"
	"io"
	"net"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// Client speaks HTTP/2 frame by frame, so that a test chooses every
// header field and how HPACK encodes it, as firebase-admin's `:scheme:
// https:` needs and Go's own client would never write.
type Client struct {
	t      testing.TB
	Conn   net.Conn
	Fr     *http2.Framer
	Enc    *hpack.Encoder
	EncBuf bytes.Buffer
	next   uint32
}

// New writes the client preface and settings on conn.
func New(t testing.TB, conn net.Conn) *Client {
	t.Helper()
	c := &Client{t: t, Conn: conn, next: 1}
	c.Fr = http2.NewFramer(conn, conn)
	c.Fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.Enc = hpack.NewEncoder(&c.EncBuf)
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := c.Fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	if err := c.Fr.WriteWindowUpdate(0, 1<<30); err != nil {
		t.Fatal(err)
	}
	return c
}

// Response is what the server answered on one stream.
type Response struct {
	Status string
	Header []hpack.HeaderField
	Body   []byte
	Reset  http2.ErrCode // RST_STREAM's code, when the stream was reset
}

// Send writes one request (its block encoded by the client's encoder,
// split into CONTINUATION frames of at most frag bytes when frag > 0) and
// reads until its answer is complete.
func (c *Client) Send(fields []hpack.HeaderField, body []byte, frag int) Response {
	c.t.Helper()
	id, err := c.Write(fields, body, frag)
	if err != nil {
		c.t.Fatal(err)
	}
	return c.Read(id)
}

// Write writes one request and returns its stream.
func (c *Client) Write(fields []hpack.HeaderField, body []byte, frag int) (uint32, error) {
	id := c.next
	c.next += 2
	c.EncBuf.Reset()
	for _, f := range fields {
		if err := c.Enc.WriteField(f); err != nil {
			return id, err
		}
	}
	block := c.EncBuf.Bytes()
	first := block
	if frag > 0 && len(block) > frag {
		first = block[:frag]
	}
	if err := c.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: body == nil, EndHeaders: len(first) == len(block)}); err != nil {
		return id, err
	}
	for rest := block[len(first):]; len(rest) > 0; {
		n := min(len(rest), frag)
		if err := c.Fr.WriteContinuation(id, n == len(rest), rest[:n]); err != nil {
			return id, err
		}
		rest = rest[n:]
	}
	if body != nil {
		return id, c.Fr.WriteData(id, true, body)
	}
	return id, nil
}

// Read reads frames until stream id is answered, answering the
// server's SETTINGS and PINGs on the way.
func (c *Client) Read(id uint32) Response {
	c.t.Helper()
	return c.ReadMany(id)[id]
}

// ReadMany reads frames until every stream of ids is answered (streams
// sent together with Write, many on the connection at once).
func (c *Client) ReadMany(ids ...uint32) map[uint32]Response {
	c.t.Helper()
	got := make(map[uint32]*Response, len(ids))
	for _, id := range ids {
		got[id] = &Response{}
	}
	done := make(map[uint32]Response, len(ids))
	end := func(id uint32) {
		done[id] = *got[id]
		delete(got, id)
	}
	for len(got) > 0 {
		f, err := c.Fr.ReadFrame()
		if err != nil {
			c.t.Fatalf("reading the answers: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = c.Fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = c.Fr.WritePing(true, f.Data)
			}
		case *http2.GoAwayFrame:
			c.t.Fatalf("GOAWAY %v", f.ErrCode)
		case *http2.RSTStreamFrame:
			if r := got[f.StreamID]; r != nil {
				r.Reset = f.ErrCode
				end(f.StreamID)
			}
		case *http2.MetaHeadersFrame:
			if r := got[f.StreamID]; r != nil {
				r.Status = f.PseudoValue("status")
				r.Header = append(r.Header, f.RegularFields()...)
				if f.StreamEnded() {
					end(f.StreamID)
				}
			}
		case *http2.DataFrame:
			if r := got[f.StreamID]; r != nil {
				r.Body = append(r.Body, f.Data()...)
				if f.StreamEnded() {
					end(f.StreamID)
				}
			}
		}
	}
	return done
}

// Request is a POST's pseudo-header fields with scheme, then the extra
// fields as name, value pairs.
func Request(scheme, path string, extra ...string) []hpack.HeaderField {
	fields := []hpack.HeaderField{
		{Name: ":method", Value: "POST"},
		{Name: ":scheme", Value: scheme},
		{Name: ":authority", Value: "fcm.googleapis.com"},
		{Name: ":path", Value: path},
	}
	for i := 0; i+1 < len(extra); i += 2 {
		fields = append(fields, hpack.HeaderField{Name: extra[i], Value: extra[i+1]})
	}
	return fields
}
