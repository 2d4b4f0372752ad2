package h2scheme

import (
	"bytes"
	"io"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"

	"github.com/freqcap/caddy-freqcap/internal/h2raw"
)

// BenchmarkWrapperRead measures what the wrapper itself costs a request
// (ns/op is per request): the client bytes of 256 FCM-sized POSTs on one
// connection, as Node's HPACK encoder would index them, read through the
// wrapper in the 9-byte and payload-sized reads of x/net's Framer. `bare`
// reads the same bytes without it; `ordinary` is a client writing
// "https" (blocks decoded, passed as sent), `colon` firebase-admin's
// "https:" (decoded, and transcoded where a literal carries it).
func BenchmarkWrapperRead(b *testing.B) {
	for _, tc := range []struct {
		name, scheme string
		wrap         bool
	}{
		{"bare", "https", false},
		{"ordinary", "https", true},
		{"colon", "https:", true},
	} {
		b.Run(tc.name, func(b *testing.B) {
			const requests = 256
			stream := clientStream(tc.scheme, requests)
			fr := make([]byte, 64<<10)
			b.SetBytes(int64(len(stream) / requests))
			b.ReportAllocs()
			b.ResetTimer()
			for done := 0; done < b.N; done += requests {
				var c io.Reader = byteConn{r: bytes.NewReader(stream)}
				if tc.wrap {
					c = Wrap(byteConn{r: bytes.NewReader(stream)}, Options{})
				}
				if _, err := io.ReadFull(c, fr[:len(http2.ClientPreface)]); err != nil {
					b.Fatal(err)
				}
				for {
					if _, err := io.ReadFull(c, fr[:9]); err != nil {
						break
					}
					n := int(fr[0])<<16 | int(fr[1])<<8 | int(fr[2])
					if _, err := io.ReadFull(c, fr[:n]); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
	}
}

// clientStream is what a client writes for n FCM sends on one
// connection: the preface, its settings, and each request's HEADERS and
// DATA.
func clientStream(scheme string, n int) []byte {
	var buf, block bytes.Buffer
	buf.WriteString(http2.ClientPreface)
	fr := http2.NewFramer(&buf, nil)
	enc := hpack.NewEncoder(&block)
	_ = fr.WriteSettings()
	body := []byte(`{"message":{"token":"` + strings.Repeat("d", 163) + `","notification":{"title":"Your order has shipped","body":"It arrives on Thursday between 9 and 12."},"data":{"order":"4711"}}}`)
	for i := 0; i < n; i++ {
		block.Reset()
		for _, f := range h2raw.Request(scheme, "/v1/projects/demo/messages:send",
			"content-type", "application/json",
			"authorization", "Bearer ya29."+strings.Repeat("x", 180),
			"x-goog-api-client", "gl-node/22.12.0 fire-admin/13.6.0",
			"x-firebase-client", "fire-admin-node/13.6.0",
			"access_token_auth", "true",
			"content-length", strconv.Itoa(len(body))) {
			_ = enc.WriteField(f)
		}
		id := uint32(2*i + 1)
		_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block.Bytes(), EndHeaders: true})
		_ = fr.WriteData(id, true, body)
	}
	return buf.Bytes()
}
