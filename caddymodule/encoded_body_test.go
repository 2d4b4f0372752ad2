package caddymodule_test

import (
	"bytes"
	"compress/gzip"
	"compress/zlib"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/bodycodec"
)

// encodeAs encodes body as a sender's library would: Go's own gzip and
// zlib (most senders' libraries sit on zlib), and zstd by bodycodec.
func encodeAs(t *testing.T, coding, body string) string {
	t.Helper()
	var buf bytes.Buffer
	switch coding {
	case "gzip":
		w := gzip.NewWriter(&buf)
		w.Write([]byte(body))
		w.Close()
	case "deflate":
		w := zlib.NewWriter(&buf)
		w.Write([]byte(body))
		w.Close()
	case "zstd":
		b, err := bodycodec.Encode(bodycodec.Zstd, []byte(body))
		if err != nil {
			t.Fatal(err)
		}
		buf.Write(b)
	default:
		t.Fatalf("no coding %s", coding)
	}
	return buf.String()
}

// decodeAs decodes what the upstream received in coding.
func decodeAs(t *testing.T, coding string, body []byte) string {
	t.Helper()
	c, err := bodycodec.Parse([]string{coding})
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := bodycodec.Decode(c, body, 1<<20)
	if err != nil {
		t.Fatalf("upstream got a body that is not %s: %v", coding, err)
	}
	return string(out)
}

// encodedSite caps each recipient of an Expo batch once a minute, dropping
// the capped ones.
func encodedSite(up string) string {
	return fmt.Sprintf(`
	frequency_cap /push/send {
		key_prefix %s
		max_body 64KiB
		batch drop
		dimension recipient {json.*.to}
		rule recipient_minute {
			by     recipient
			limit  1
			window 1m
		}
	}
	reverse_proxy %s`, testPrefix(), up)
}

// TestEncodedBodies proves, for each coding senders use, that the
// recipients of an encoded body are capped as a plain body's are, that
// the upstream gets the bytes exactly as sent, and that a body batch drop
// rewrote goes out in the coding it came in, with its length.
func TestEncodedBodies(t *testing.T) {
	for _, coding := range []string{"gzip", "deflate", "zstd"} {
		t.Run(coding, func(t *testing.T) {
			up := startUpstream(t)
			g := startGateway(t, encodedSite(up.addr()))
			first := encodeAs(t, coding, `[{"to":"a","body":"hi"},{"to":"b","body":"hi"}]`)
			a := g.post("/push/send", "application/json", first, "Content-Encoding: "+coding)
			expectStatus(t, a, http.StatusOK)
			got := up.last()
			if !bytes.Equal(got.body, []byte(first)) || got.header.Get("Content-Encoding") != coding {
				t.Fatalf("upstream got %q (%s), want the bytes as sent", got.body, got.header.Get("Content-Encoding"))
			}
			// a is capped now: it is dropped, c goes on, re-encoded.
			a = g.post("/push/send", "application/json", encodeAs(t, coding, `[{"to":"a","body":"hi"}, {"to":"c","body":"hi"}]`), "Content-Encoding: "+coding)
			expectStatus(t, a, http.StatusOK)
			if d := a.header.Get("Frequency-Cap-Dropped"); d != `"0.to"` {
				t.Errorf("Frequency-Cap-Dropped %q", d)
			}
			got = up.last()
			if plain := decodeAs(t, coding, got.body); plain != `[{"to":"c","body":"hi"}]` {
				t.Errorf("upstream got %q after the drop", plain)
			}
			if got.contentLength != int64(len(got.body)) || got.header.Get("Content-Encoding") != coding {
				t.Errorf("rewritten body: Content-Length %d for %d bytes, Content-Encoding %q", got.contentLength, len(got.body), got.header.Get("Content-Encoding"))
			}
		})
	}
}

// TestEncodedBodyFailures proves that a body expanding past max_body is a
// fast 413, corrupt data a 400, and an encoding the module cannot read a
// 415 naming those it can; that no body is none in any coding; that none of them counts anything; and that a
// cap set whose dimensions do not read the body passes any encoding on.
func TestEncodedBodyFailures(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, encodedSite(up.addr()))
	// 64 MiB of spaces inside a valid array: a few tens of kilobytes
	// gzipped, 1000 times max_body decoded.
	bomb := encodeAs(t, "gzip", `[{"to":"x"}`+strings.Repeat(" ", 64<<20)+`]`)
	start := time.Now()
	a := g.post("/push/send", "application/json", bomb, "Content-Encoding: gzip")
	expectFailure(t, a, http.StatusRequestEntityTooLarge, "decoded from gzip is larger than max_body (65536 bytes)")
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the bomb took %v to refuse", took)
	}
	whole := encodeAs(t, "gzip", `[{"to":"x"}]`)
	expectFailure(t, g.post("/push/send", "application/json", whole[:len(whole)-4], "Content-Encoding: gzip"), http.StatusBadRequest, "request body: not valid gzip: the data ends early")
	a = g.post("/push/send", "application/json", "x", "Content-Encoding: br")
	expectFailure(t, a, http.StatusUnsupportedMediaType, `unsupported content coding "br"`)
	if ae := a.header.Get("Accept-Encoding"); ae != "gzip, deflate, zstd" {
		t.Errorf("415 Accept-Encoding %q", ae)
	}
	// No body at all is no body whatever its declared coding: its
	// dimensions are missing, as without one (gzip and deflate said the
	// data ended early, zstd that the recipient was missing).
	plain := g.post("/push/send", "application/json", "")
	for _, coding := range []string{"gzip", "deflate", "zstd"} {
		a := g.post("/push/send", "application/json", "", "Content-Encoding: "+coding)
		if a.status != plain.status || string(a.body) != string(plain.body) {
			t.Errorf("an empty body declared %s: %d %s, want as without a coding: %d %s", coding, a.status, a.body, plain.status, plain.body)
		}
	}
	// Nothing above counted x: its first send is admitted.
	expectStatus(t, g.post("/push/send", "application/json", whole, "Content-Encoding: gzip"), http.StatusOK)
	if up.count() != 1 {
		t.Errorf("upstream got %d requests, want 1", up.count())
	}

	// A cap set that reads only headers never looks at the body.
	up2 := startUpstream(t)
	g2 := startGateway(t, fmt.Sprintf(`
	frequency_cap {
		key_prefix %s
		dimension recipient {http.request.header.X-To}
		rule minute {
			by     recipient
			limit  1
			window 1m
		}
	}
	reverse_proxy %s`, testPrefix(), up2.addr()))
	expectStatus(t, g2.post("/", "application/json", "\x00brotli bytes", "Content-Encoding: br", "X-To: y"), http.StatusOK)
	if got := up2.last(); string(got.body) != "\x00brotli bytes" || got.header.Get("Content-Encoding") != "br" {
		t.Errorf("upstream got %q (%s)", got.body, got.header.Get("Content-Encoding"))
	}
}
