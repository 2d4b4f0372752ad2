package h2scheme

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"sort"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// rawClient speaks HTTP/2 frame by frame, so that a test chooses every
// header field and how HPACK encodes it, as firebase-admin's `:scheme:
// https:` needs and Go's own client would never write.
type rawClient struct {
	t      testing.TB
	conn   net.Conn
	fr     *http2.Framer
	enc    *hpack.Encoder
	encBuf bytes.Buffer
	next   uint32
}

func dialRaw(t testing.TB, conn net.Conn) *rawClient {
	t.Helper()
	c := &rawClient{t: t, conn: conn, next: 1}
	c.fr = http2.NewFramer(conn, conn)
	c.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.enc = hpack.NewEncoder(&c.encBuf)
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30}); err != nil {
		t.Fatal(err)
	}
	if err := c.fr.WriteWindowUpdate(0, 1<<30); err != nil {
		t.Fatal(err)
	}
	return c
}

// response is what the server answered on one stream.
type response struct {
	status string
	header []hpack.HeaderField
	body   []byte
	reset  http2.ErrCode // RST_STREAM's code, when the stream was reset
}

// send writes one request (its block encoded by the client's encoder,
// split into CONTINUATION frames of at most frag bytes when frag > 0) and
// reads until its answer is complete.
func (c *rawClient) send(fields []hpack.HeaderField, body []byte, frag int) response {
	c.t.Helper()
	id, err := c.write(fields, body, frag)
	if err != nil {
		c.t.Fatal(err)
	}
	return c.read(id)
}

// write writes one request and returns its stream.
func (c *rawClient) write(fields []hpack.HeaderField, body []byte, frag int) (uint32, error) {
	id := c.next
	c.next += 2
	c.encBuf.Reset()
	for _, f := range fields {
		if err := c.enc.WriteField(f); err != nil {
			return id, err
		}
	}
	block := c.encBuf.Bytes()
	first := block
	if frag > 0 && len(block) > frag {
		first = block[:frag]
	}
	if err := c.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: first, EndStream: body == nil, EndHeaders: len(first) == len(block)}); err != nil {
		return id, err
	}
	for rest := block[len(first):]; len(rest) > 0; {
		n := min(len(rest), frag)
		if err := c.fr.WriteContinuation(id, n == len(rest), rest[:n]); err != nil {
			return id, err
		}
		rest = rest[n:]
	}
	if body != nil {
		return id, c.fr.WriteData(id, true, body)
	}
	return id, nil
}

func (c *rawClient) read(id uint32) response {
	c.t.Helper()
	var r response
	for {
		f, err := c.fr.ReadFrame()
		if err != nil {
			c.t.Fatalf("stream %d: reading the answer: %v", id, err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = c.fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = c.fr.WritePing(true, f.Data)
			}
		case *http2.GoAwayFrame:
			c.t.Fatalf("stream %d: GOAWAY %v", id, f.ErrCode)
		case *http2.RSTStreamFrame:
			if f.StreamID == id {
				r.reset = f.ErrCode
				return r
			}
		case *http2.MetaHeadersFrame:
			if f.StreamID != id {
				continue
			}
			r.status = f.PseudoValue("status")
			r.header = append(r.header, f.RegularFields()...)
			if f.StreamEnded() {
				return r
			}
		case *http2.DataFrame:
			if f.StreamID != id {
				continue
			}
			r.body = append(r.body, f.Data()...)
			if f.StreamEnded() {
				return r
			}
		}
	}
}

// echo answers each request with what it received: its method, path,
// host and header fields, one "name: value" line each, sorted.
func echo(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	fmt.Fprint(w, describe(r.Method, r.URL.RequestURI(), r.Host, r.Header, len(body)))
}

func describe(method, path, host string, h http.Header, bodyLen int) string {
	var lines []string
	for k, vs := range h {
		for _, v := range vs {
			lines = append(lines, strings.ToLower(k)+": "+v)
		}
	}
	sort.Strings(lines)
	return fmt.Sprintf("%s %s %s %d\n%s", method, path, host, bodyLen, strings.Join(lines, "\n"))
}

// expected is describe's text for the fields a client sent.
func expected(fields []hpack.HeaderField, bodyLen int) string {
	h := http.Header{}
	var method, path, host string
	for _, f := range fields {
		switch f.Name {
		case ":method":
			method = f.Value
		case ":path":
			path = f.Value
		case ":authority":
			host = f.Value
		case ":scheme":
		default:
			h.Add(f.Name, f.Value)
		}
	}
	return describe(method, path, host, h, bodyLen)
}

// serveH2 serves HTTP/2 with x/net's server (as Caddy does) on a loopback
// listener, each connection wrapped when wrap is set, and returns the
// address.
func serveH2(t testing.TB, wrap bool, opts Options, h http.HandlerFunc) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	srv := &http2.Server{}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if wrap {
				c = Wrap(c, opts)
			}
			go srv.ServeConn(c, &http2.ServeConnOpts{Handler: h})
		}
	}()
	return ln.Addr().String()
}

func dial(t testing.TB, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func request(scheme, path string, extra ...string) []hpack.HeaderField {
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
