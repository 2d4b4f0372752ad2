package caddymodule

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/freqcap/caddy-freqcap/internal/bodycodec"
)

var fzCodings = []bodycodec.Coding{bodycodec.Gzip, bodycodec.Deflate, bodycodec.RawDeflate, bodycodec.Zstd}

// FuzzEncodedBody sends readBody random bodies encoded in every coding,
// whole and cut short, beside the same body plain. It never panics; a
// whole encoded body reads exactly as the plain one does (the same JSON,
// or the same refusal), so it counts the same recipients; a cut one is
// refused with 400 and counts nothing; and the bytes handed on are the
// encoded ones as sent.
func FuzzEncodedBody(f *testing.F) {
	f.Add([]byte(`[{"to":"a","body":"x"},{"to":["b","c"]}]`), uint8(0), uint16(0), uint32(0))
	f.Add([]byte(`{"to":"a"}`), uint8(3), uint16(3), uint32(5))
	f.Add([]byte(`[1,2,3`), uint8(1), uint16(0), uint32(100))
	// A zstd body decoding past max_body is 413, as it is plain (it was
	// once a 400 "not valid zstd").
	f.Add([]byte(`[`+strings.Repeat(`{"to":"a","body":"x"},`, 10)+`1]`), uint8(3), uint16(0), uint32(106))
	f.Fuzz(func(t *testing.T, plain []byte, which uint8, cut uint16, maxBodyN uint32) {
		c := fzCodings[int(which)%len(fzCodings)]
		maxBody := fzMaxBody(maxBodyN)
		enc, err := bodycodec.Encode(c, plain)
		if err != nil {
			t.Fatal(err)
		}
		if cut > 0 && int(cut) < len(enc) {
			enc = enc[:len(enc)-int(cut)]
		} else {
			cut = 0
		}
		r, _ := fzRequest(enc, which&0x80 != 0)
		r.Header.Set("Content-Encoding", c.String())
		b, fail := readBody(r, needJSON, maxBody)
		if fail == nil {
			handed := new(bytes.Buffer)
			handed.ReadFrom(r.Body)
			if !bytes.Equal(handed.Bytes(), enc) {
				t.Fatalf("%v: the next handler reads %d bytes, not the %d sent", c, handed.Len(), len(enc))
			}
		}
		if int64(len(enc)) > maxBody {
			if fail == nil || fail.Status != http.StatusRequestEntityTooLarge {
				t.Fatalf("%v: %d encoded bytes over max_body %d: %+v", c, len(enc), maxBody, fail)
			}
			return
		}
		if cut > 0 {
			if fail == nil || (fail.Status != http.StatusBadRequest && fail.Status != http.StatusRequestEntityTooLarge) {
				t.Fatalf("%v: a body cut %d bytes short was read: %+v", c, cut, fail)
			}
			return
		}
		pr, _ := fzRequest(plain, false)
		pb, pfail := readBody(pr, needJSON, maxBody)
		switch {
		case (fail == nil) != (pfail == nil):
			t.Fatalf("%v: encoded %+v, plain %+v", c, fail, pfail)
		case fail != nil && fail.Status != pfail.Status:
			t.Fatalf("%v: encoded refused %d, plain %d", c, fail.Status, pfail.Status)
		case fail == nil && !bytes.Equal(b.json, pb.json):
			t.Fatalf("%v: encoded reads %q, plain %q", c, b.json, pb.json)
		case fail == nil && b.coding != c:
			t.Fatalf("%v: read as %v", c, b.coding)
		}
	})
}
