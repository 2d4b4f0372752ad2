package bodycodec

import (
	"bytes"
	"errors"
	"testing"
)

// FuzzDecode feeds Decode random bodies in every coding, whole, cut short
// and as raw bytes: it never panics, never returns more than the limit,
// always returns one of its three errors when it fails, reads back
// exactly what Encode wrote, and calls a whole body that decodes past the
// limit ErrTooLarge.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`[{"to":"ExponentPushToken[a]","body":"x"}]`), uint8(1), uint16(0), uint16(1000))
	f.Add([]byte("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"), uint8(4), uint16(5), uint16(10))
	f.Add([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff}, uint8(9), uint16(0), uint16(100))
	f.Fuzz(func(t *testing.T, plain []byte, which uint8, cut uint16, limit uint16) {
		c := codings[int(which)%len(codings)]
		raw := which >= uint8(len(codings)) // the bytes themselves, as if encoded
		data := plain
		if !raw {
			var err error
			if data, err = Encode(c, plain); err != nil {
				t.Fatal(err)
			}
			if cut > 0 && int(cut) < len(data) {
				data = data[:len(data)-int(cut)]
			}
		}
		in := c
		if in == RawDeflate {
			in = Deflate
		}
		got, _, err := Decode(in, data, int64(limit))
		if int64(len(got)) > int64(limit) {
			t.Fatalf("%v: %d bytes out, limit %d", c, len(got), limit)
		}
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("%v: unexpected error %v", c, err)
			}
			if !raw && cut == 0 && len(plain) <= int(limit) {
				t.Fatalf("%v: what Encode wrote did not decode: %v", c, err)
			}
			if !raw && cut == 0 && !errors.Is(err, ErrTooLarge) {
				t.Fatalf("%v: %d bytes over the limit %d: %v, want ErrTooLarge", c, len(plain), limit, err)
			}
			return
		}
		if !raw && cut == 0 && len(plain) > int(limit) {
			t.Fatalf("%v: %d bytes decoded with the limit %d", c, len(plain), limit)
		}
		if !raw && cut == 0 && !bytes.Equal(got, plain) {
			t.Fatalf("%v: round trip changed the body", c)
		}
		if !raw && cut > 0 && int(cut) < len(data)+int(cut) && c != Identity && !bytes.Equal(got, plain) {
			t.Fatalf("%v: a cut body decoded to something else than the body: %q", c, got)
		}
	})
}
