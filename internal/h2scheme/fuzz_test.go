package h2scheme

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/freqcap/caddy-freqcap/internal/h2raw"
)

// FuzzRewriteKeepsFrames holds the wrapper to a reference reading of any
// frames a hostile client could send: x/net's own Framer and HPACK
// decoder (what Go's server reads with) read the client's bytes and the
// wrapper's output, and
//
//   - every frame the server would read from the output is the client's
//     frame at the same place: header blocks with the same fields (the
//     scheme fixed), END_STREAM and priority; every other frame byte for
//     byte. So the wrapper adds, drops and weakens nothing;
//   - when the client's bytes read cleanly to their end (no connection
//     error, no PUSH_PROMISE, which Go's server refuses unread, and no
//     block past the wrapper's bound, no block that x/net refuses as a
//     stream error), the output has every frame too.
//
// The wrapper never panics, and its memory is bounded by its options.
func FuzzRewriteKeepsFrames(f *testing.F) {
	for _, seed := range fuzzSeeds() {
		f.Add(seed)
	}
	const limit = 16 << 10
	f.Fuzz(func(t *testing.T, in []byte) {
		out, werr := runWrapper(append([]byte(http2.ClientPreface), in...), limit)
		if !bytes.HasPrefix(out, []byte(http2.ClientPreface)) {
			t.Fatalf("the preface did not pass: %q", out)
		}
		want, inErr := readFrames(in)
		got, _ := readFrames(out[len(http2.ClientPreface):])
		if len(got) > len(want) {
			t.Fatalf("the output has %d frames, the input %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("frame %d:\n got %s\nwant %s", i, got[i], want[i])
			}
		}
		// x/net stops decoding a block's strings once a field is invalid
		// (a stream error), so a bad Huffman string after it goes
		// unnoticed there and ends the connection here: stricter, never
		// weaker. Clean input is held to every frame.
		clean := inErr == io.EOF && endsOnFrame(in) && !strings.Contains(strings.Join(want, "\n"), "stream error")
		if clean && (werr == io.EOF || werr == nil) && len(got) != len(want) {
			t.Fatalf("the input reads cleanly to its end, but the output has %d of its %d frames", len(got), len(want))
		}
		if clean && werr != nil && werr != io.EOF && !errors.Is(werr, errBlockTooLarge) {
			t.Fatalf("the input reads cleanly, but the wrapper failed: %v", werr)
		}
	})
}

// endsOnFrame reports whether b is whole frames and whole header blocks
// (the Framer reports a missing payload or CONTINUATION as io.EOF, so
// its io.EOF alone does not say).
func endsOnFrame(b []byte) bool {
	i, open := 0, false
	for i+9 <= len(b) {
		if typ := b[i+3]; typ == typeHeaders || typ == typeContinuation {
			open = b[i+4]&flagEndHeaders == 0
		}
		i += 9 + (int(b[i])<<16 | int(b[i+1])<<8 | int(b[i+2]))
	}
	return i == len(b) && !open
}

// byteConn is a connection that reads the given bytes and writes nowhere.
type byteConn struct {
	net.Conn
	r *bytes.Reader
}

func (c byteConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c byteConn) Write(p []byte) (int, error) { return len(p), nil }

// runWrapper reads all the wrapper hands out for the client bytes in, and
// the error it stopped with.
func runWrapper(in []byte, limit int) ([]byte, error) {
	c := Wrap(byteConn{r: bytes.NewReader(in)}, Options{MaxHeaderListSize: limit})
	var out []byte
	buf := make([]byte, 4096)
	for {
		n, err := c.Read(buf)
		out = append(out, buf[:n]...)
		if err != nil {
			return out, err
		}
	}
}

var errPushPromise = errors.New("PUSH_PROMISE")

// readFrames reads frames as Go's server does and describes each: a
// header block by its fields (the scheme fixed), anything else by its
// bytes. It stops at the first error that ends a connection (io.EOF when
// the bytes end cleanly).
func readFrames(b []byte) ([]string, error) {
	fr := http2.NewFramer(io.Discard, bytes.NewReader(b))
	fr.ReadMetaHeaders = hpack.NewDecoder(tableSize, nil)
	fr.MaxHeaderListSize = 1 << 24
	var frames []string
	for {
		f, err := fr.ReadFrame()
		var se http2.StreamError
		if errors.As(err, &se) {
			frames = append(frames, fmt.Sprintf("stream error %d %v", se.StreamID, se.Code))
			continue
		}
		if err != nil {
			return frames, err
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			var s strings.Builder
			fmt.Fprintf(&s, "HEADERS %d end_stream=%v priority=%v/%+v truncated=%v:", f.StreamID, f.StreamEnded(), f.HasPriority(), f.Priority, f.Truncated)
			for _, hf := range f.Fields {
				if v, ok := fixedScheme(hf.Value); ok && hf.Name == ":scheme" {
					hf.Value = v
				}
				fmt.Fprintf(&s, " %q=%q", hf.Name, hf.Value)
			}
			frames = append(frames, s.String())
		case *http2.PushPromiseFrame:
			return frames, errPushPromise
		default:
			h := f.Header()
			var payload []byte
			if u, ok := f.(*http2.UnknownFrame); ok {
				payload = u.Payload()
			} else {
				payload = []byte(fmt.Sprintf("%+v", f))
			}
			frames = append(frames, fmt.Sprintf("%v flags=%#x stream=%d %x", h.Type, h.Flags, h.StreamID, payload))
		}
	}
}

// fuzzSeeds are streams a client writes: ordinary and fixed schemes,
// padding, priority, CONTINUATION, data, settings, pings.
func fuzzSeeds() [][]byte {
	var seeds [][]byte
	for _, scheme := range []string{"https", "https:", "http:"} {
		var buf, block bytes.Buffer
		fr := http2.NewFramer(&buf, nil)
		enc := hpack.NewEncoder(&block)
		_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 20})
		for i, f := range h2raw.Request(scheme, "/v1/projects/p/messages:send", "content-type", "application/json", "authorization", "Bearer x") {
			f.Sensitive = i == 5
			_ = enc.WriteField(f)
		}
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: block.Bytes(), EndHeaders: true, PadLength: 3, Priority: http2.PriorityParam{StreamDep: 0, Weight: 15}})
		_ = fr.WriteData(1, true, []byte(`{"message":{"token":"t"}}`))
		block.Reset()
		enc.SetMaxDynamicTableSize(100)
		for _, f := range h2raw.Request(scheme, "/again", "x-a", strings.Repeat("a", 40)) {
			_ = enc.WriteField(f)
		}
		half := block.Len() / 2
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 3, BlockFragment: block.Bytes()[:half], EndStream: true})
		_ = fr.WriteContinuation(3, true, block.Bytes()[half:])
		_ = fr.WritePing(false, [8]byte{1})
		_ = fr.WriteWindowUpdate(0, 1000)
		seeds = append(seeds, buf.Bytes())
	}
	return seeds
}
