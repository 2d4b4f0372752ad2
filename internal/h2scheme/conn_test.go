package h2scheme

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/freqcap/caddy-freqcap/internal/h2raw"
)

// TestSchemeWithColonIsServed proves the problem and the fix: Go's HTTP/2
// server resets a stream whose `:scheme` is "https:" (as firebase-admin
// for Node writes it) with PROTOCOL_ERROR, and serves it through the
// wrapper, as "https", on the same connection as ordinary requests.
func TestSchemeWithColonIsServed(t *testing.T) {
	body := []byte(`{"message":{"token":"t1"}}`)
	const path = "/v1/projects/p/messages:send"

	bare := h2raw.New(t, dial(t, serveH2(t, false, Options{}, echo)))
	if r := bare.Send(h2raw.Request("https:", path, "content-type", "application/json"), body, 0); r.Reset != http2.ErrCodeProtocol {
		t.Fatalf("without the wrapper: got %+v, want the stream reset with PROTOCOL_ERROR", r)
	}

	c := h2raw.New(t, dial(t, serveH2(t, true, Options{}, echo)))
	for i, scheme := range []string{"https", "https:", "https:", "http:", "https"} {
		fields := h2raw.Request(scheme, path, "content-type", "application/json", "x-n", fmt.Sprint(i))
		r := c.Send(fields, body, 0)
		if r.Status != "200" || string(r.Body) != expected(fields, len(body)) {
			t.Fatalf("request %d (%q): status %q reset %v, body\n%s\nwant\n%s", i, scheme, r.Status, r.Reset, r.Body, expected(fields, len(body)))
		}
	}
}

// TestOtherSchemesStayRefused proves the wrapper fixes only the trailing
// colon: any other scheme Go refuses is still refused.
func TestOtherSchemesStayRefused(t *testing.T) {
	c := h2raw.New(t, dial(t, serveH2(t, true, Options{}, echo)))
	for _, scheme := range []string{"https::", "HTTPS:", "ftp:", "", ":"} {
		if r := c.Send(h2raw.Request(scheme, "/"), nil, 0); r.Reset != http2.ErrCodeProtocol {
			t.Errorf("scheme %q: got %+v, want PROTOCOL_ERROR", scheme, r)
		}
	}
}

// TestLongConnectionKeepsTablesInStep sends 600 requests on one
// connection whose header fields (random names and values, up to 40 a
// request, many repeated so that the client refers to them by index)
// overflow the 4 KiB dynamic table over and over, with `:scheme` written
// both ways, fields never indexed, client table-size changes, and blocks
// split into CONTINUATION frames, and the client shrinking its table to
// 256 bytes, then 0, and back: the server's table, which holds every
// fixed entry a byte shorter, must still name what the client names. The server must see exactly the fields
// sent, every time: one byte of drift between the wrapper's tables and
// the client's or the server's would decode a wrong field from then on.
func TestLongConnectionKeepsTablesInStep(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	// Blocks cut into CONTINUATION frames of a few bytes take ten times
	// their size in frames: above the default bound, which counts them.
	c := h2raw.New(t, dial(t, serveH2(t, true, Options{MaxHeaderListSize: 1 << 20}, echo)))
	var pool []hpack.HeaderField
	for i := 0; i < 200; i++ {
		pool = append(pool, hpack.HeaderField{
			Name:  fmt.Sprintf("x-f%d", rng.IntN(60)),
			Value: strings.Repeat(string(rune('a'+rng.IntN(26))), 1+rng.IntN(300)),
		})
	}
	for i := 0; i < 600; i++ {
		scheme := "https"
		if i >= 50 && rng.IntN(3) > 0 {
			scheme = "https:"
		}
		fields := h2raw.Request(scheme, fmt.Sprintf("/v1/projects/p/messages:send?n=%d", i))
		for n := rng.IntN(40); n > 0; n-- {
			f := pool[rng.IntN(len(pool))]
			f.Sensitive = rng.IntN(8) == 0
			fields = append(fields, f)
		}
		switch i {
		case 20: // a smaller table when the first fix comes (request 50)
			c.Enc.SetMaxDynamicTableSize(256)
		case 100:
			c.Enc.SetMaxDynamicTableSize(4096)
		case 200:
			c.Enc.SetMaxDynamicTableSize(512)
		case 300:
			c.Enc.SetMaxDynamicTableSize(0)
		case 320:
			c.Enc.SetMaxDynamicTableSize(4096)
		}
		frag := 0
		if i%7 == 0 {
			frag = 1 + rng.IntN(64)
		}
		body := []byte(strings.Repeat("b", rng.IntN(3000)))
		r := c.Send(fields, body, frag)
		if want := expected(fields, len(body)); r.Status != "200" || string(r.Body) != want {
			t.Fatalf("request %d: status %q reset %v\ngot  %q\nwant %q", i, r.Status, r.Reset, r.Body, want)
		}
	}
}

// TestHeaderBlockBounds proves a header block costs bounded memory: an
// HPACK bomb (a small block naming one large table entry again and
// again) and a CONTINUATION flood (empty frames that never end the block)
// each end the connection once the block passes MaxHeaderListSize,
// without the server seeing the block.
func TestHeaderBlockBounds(t *testing.T) {
	const limit = 64 << 10
	seen := make(chan string, 10)
	addr := serveH2(t, true, Options{MaxHeaderListSize: limit}, func(w http.ResponseWriter, r *http.Request) {
		seen <- r.URL.Path
	})

	t.Run("HPACK bomb", func(t *testing.T) {
		c := h2raw.New(t, dial(t, addr))
		big := hpack.HeaderField{Name: "x-big", Value: strings.Repeat("v", 3000)}
		fields := h2raw.Request("https:", "/bomb")
		for i := 0; i < 100; i++ { // 100 × 3 KiB decoded, from about 3 KiB sent
			fields = append(fields, big)
		}
		expectClosed(t, c, func() { _, _ = c.Write(fields, nil, 0) })
	})
	t.Run("CONTINUATION flood", func(t *testing.T) {
		c := h2raw.New(t, dial(t, addr))
		c.EncBuf.Reset()
		for _, f := range h2raw.Request("https", "/flood") {
			_ = c.Enc.WriteField(f)
		}
		_ = c.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: c.EncBuf.Bytes(), EndStream: true})
		expectClosed(t, c, func() {
			for i := 0; i < limit; i++ { // 9 bytes each: past the limit long before the end
				if err := c.Fr.WriteContinuation(1, false, nil); err != nil {
					return
				}
			}
		})
	})
	t.Run("a frame over 1 MiB", func(t *testing.T) {
		// Go's server ends the connection for it (FRAME_SIZE_ERROR): so
		// does the wrapper, even where it would rewrite the block into
		// smaller frames, and whatever its own bound.
		addr := serveH2(t, true, Options{MaxHeaderListSize: 4 << 20}, func(w http.ResponseWriter, r *http.Request) {
			seen <- r.URL.Path
		})
		c := h2raw.New(t, dial(t, addr))
		c.EncBuf.Reset()
		for _, f := range h2raw.Request("https:", "/big-frame") {
			_ = c.Enc.WriteField(f)
		}
		// Padding up to the size: a block the wrapper reads whole.
		block := append(bytes.Repeat([]byte{0x20}, 1<<20), c.EncBuf.Bytes()...) // dynamic table size updates to 0
		expectClosed(t, c, func() {
			_ = c.Fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block, EndStream: true, EndHeaders: true})
		})
	})
	select {
	case p := <-seen:
		t.Errorf("the server served %s", p)
	default:
	}
}

// TestDefaultBoundIsCaddys proves the default bound of a header block is
// near what Caddy's server accepts by default (16 KiB), not Go's 1 MiB: a
// block of 40 KiB, which Caddy refuses, ends the connection before the
// wrapper holds more (a probe's 1 MB blocks held 2.2 MB a connection).
func TestDefaultBoundIsCaddys(t *testing.T) {
	if DefaultMaxHeaderListSize > 64<<10 {
		t.Fatalf("DefaultMaxHeaderListSize %d", DefaultMaxHeaderListSize)
	}
	addr := serveH2(t, true, Options{}, func(w http.ResponseWriter, r *http.Request) {
		t.Errorf("the server served %s", r.URL.Path)
	})
	c := h2raw.New(t, dial(t, addr))
	fields := append(h2raw.Request("https:", "/forty"), hpack.HeaderField{Name: "x-big", Value: strings.Repeat("v", 40<<10)})
	expectClosed(t, c, func() { _, _ = c.Write(fields, nil, 0) })
}

// expectClosed runs send and checks that the connection then ends
// without an answer.
func expectClosed(t *testing.T, c *h2raw.Client, send func()) {
	t.Helper()
	done := make(chan struct{})
	go func() {
		defer close(done)
		send()
	}()
	_ = c.Conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	for {
		f, err := c.Fr.ReadFrame()
		if err != nil {
			if strings.Contains(err.Error(), "timeout") {
				t.Fatal("the connection stayed open")
			}
			break
		}
		if h, ok := f.(*http2.MetaHeadersFrame); ok {
			t.Fatalf("the server answered stream %d", h.StreamID)
		}
	}
	c.Conn.Close()
	<-done
}
