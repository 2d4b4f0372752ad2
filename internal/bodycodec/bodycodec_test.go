package bodycodec

import (
	"bytes"
	"compress/flate"
	stdgzip "compress/gzip"
	"errors"
	"math/rand/v2"
	"strings"
	"testing"
)

var codings = []Coding{Identity, Gzip, Deflate, RawDeflate, Zstd}

// TestRoundTrip proves that what Encode writes Decode reads back whole,
// in the coding it was written in.
func TestRoundTrip(t *testing.T) {
	plain := []byte(strings.Repeat(`{"to":"ExponentPushToken[xxxxxxxxxxxxxxxxxxxxxx]","body":"hello"},`, 200))
	for _, c := range codings {
		enc, err := Encode(c, plain)
		if err != nil {
			t.Fatalf("%v: %v", c, err)
		}
		in := c
		if c == RawDeflate {
			in = Deflate // both arrive as "deflate"
		}
		got, found, err := Decode(in, enc, int64(len(plain)))
		if err != nil || !bytes.Equal(got, plain) || found != c {
			t.Errorf("%v: decoded %d bytes as %v, %v; want %d bytes as %v", c, len(got), found, err, len(plain), c)
		}
	}
}

// TestLimitIsOnDecodedBytes proves that a small body expanding past the
// limit is ErrTooLarge, and one expanding exactly to it is read.
func TestLimitIsOnDecodedBytes(t *testing.T) {
	plain := bytes.Repeat([]byte{'a'}, 1<<20)
	for _, c := range codings[1:] {
		enc, _ := Encode(c, plain)
		if len(enc) > 10<<10 {
			t.Fatalf("%v: a MiB of one byte encodes to %d bytes", c, len(enc))
		}
		if _, _, err := Decode(c, enc, 1<<20-1); !errors.Is(err, ErrTooLarge) {
			t.Errorf("%v: limit one byte short: %v, want ErrTooLarge", c, err)
		}
		if _, _, err := Decode(c, enc, 1<<20); err != nil {
			t.Errorf("%v: limit exactly the size: %v", c, err)
		}
	}
}

// TestSmallBodiesOverTheLimit proves that a whole body decoding to more
// than the limit is ErrTooLarge in every coding, for small limits and
// small bodies of mixed runs, literals and repeats: the zstd decoder
// reports a block that does not fit the buffer left as a corrupt block,
// so these were answered 400 "not valid zstd" where the same body plain
// was 413. Bodies within the limit decode.
func TestSmallBodiesOverTheLimit(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		plain := mixedBody(rng, rng.IntN(2<<rng.IntN(12))+1)
		c := codings[rng.IntN(len(codings))]
		enc, err := Encode(c, plain)
		if err != nil {
			t.Fatal(err)
		}
		limit := int64(rng.IntN(2*len(plain)) + 1)
		in := c
		if c == RawDeflate {
			in = Deflate
		}
		_, _, err = Decode(in, enc, limit)
		switch over := int64(len(plain)) > limit; {
		case over && !errors.Is(err, ErrTooLarge):
			t.Fatalf("%v: %d bytes (%d encoded), limit %d: %v, want ErrTooLarge", c, len(plain), len(enc), limit, err)
		case !over && err != nil:
			t.Fatalf("%v: %d bytes (%d encoded), limit %d: %v", c, len(plain), len(enc), limit, err)
		}
	}
}

// mixedBody is n bytes of single random bytes, runs of one byte, and
// repeats of what came before, the shapes that give every block type.
func mixedBody(rng *rand.Rand, n int) []byte {
	b := make([]byte, 0, n)
	for len(b) < n {
		switch rng.IntN(3) {
		case 0:
			b = append(b, byte(rng.IntN(256)))
		case 1:
			b = append(b, bytes.Repeat([]byte{byte(rng.IntN(256))}, rng.IntN(300))...)
		case 2:
			if len(b) > 0 {
				from := rng.IntN(len(b))
				b = append(b, b[from:from+rng.IntN(len(b)-from)]...)
			}
		}
	}
	return b[:n]
}

// TestCorrupt proves that data that is not of its coding, that ends
// early, or that has bytes after its end is ErrCorrupt, never a prefix
// read as the body.
func TestCorrupt(t *testing.T) {
	plain := []byte(`[{"to":"a"},{"to":"b"}]`)
	for _, c := range codings[1:] {
		enc, _ := Encode(c, plain)
		for _, bad := range [][]byte{enc[:len(enc)-1], enc[:len(enc)/2], append(append([]byte{}, enc...), 'x'), []byte("not encoded at all")} {
			if c == RawDeflate && string(bad) == "not encoded at all" {
				continue // some text is valid raw deflate by accident; truncations are the point
			}
			if got, _, err := Decode(c, bad, 1<<20); !errors.Is(err, ErrCorrupt) {
				t.Errorf("%v: %q decoded to %q, %v; want ErrCorrupt", c, bad, got, err)
			}
		}
	}
}

// TestStandardLibraryBodies proves that bodies from another encoder (Go's
// own, as most senders' libraries are built on zlib) are read.
func TestStandardLibraryBodies(t *testing.T) {
	plain := []byte(`[{"to":"a","body":"hi"}]`)
	var gz, fl bytes.Buffer
	w := stdgzip.NewWriter(&gz)
	w.Write(plain)
	w.Close()
	f, _ := flate.NewWriter(&fl, flate.BestCompression)
	f.Write(plain)
	f.Close()
	for _, tc := range []struct {
		c    Coding
		data []byte
		want Coding
	}{{Gzip, gz.Bytes(), Gzip}, {Deflate, fl.Bytes(), RawDeflate}} {
		got, found, err := Decode(tc.c, tc.data, 1<<10)
		if err != nil || !bytes.Equal(got, plain) || found != tc.want {
			t.Errorf("%v: %q %v %v", tc.c, got, found, err)
		}
	}
}

// TestParse proves which Content-Encoding values are read.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		in   []string
		want Coding
		err  bool
	}{
		{nil, Identity, false},
		{[]string{"identity"}, Identity, false},
		{[]string{"GZIP"}, Gzip, false},
		{[]string{"x-gzip"}, Gzip, false},
		{[]string{" deflate "}, Deflate, false},
		{[]string{"zstd"}, Zstd, false},
		{[]string{"br"}, Identity, true},
		{[]string{"gzip, zstd"}, Identity, true},
		{[]string{"gzip", "gzip"}, Identity, true},
		{[]string{"identity, gzip"}, Gzip, false},
	} {
		got, err := Parse(tc.in)
		if got != tc.want || (err != nil) != tc.err || (err != nil && !errors.Is(err, ErrUnsupported)) {
			t.Errorf("Parse(%q) = %v, %v", tc.in, got, err)
		}
	}
}

// A body that does not decode is refused with a message that names its
// coding once ("not valid gzip: invalid header"), never the decoder's own
// prefix after it ("gzip: gzip: invalid header").
func TestCorruptMessages(t *testing.T) {
	plain := []byte(`[{"to":"a"},{"to":"b"}]`)
	for _, c := range codings[1:] {
		enc, _ := Encode(c, plain)
		for _, bad := range [][]byte{enc[:len(enc)-1], enc[:3], append(append([]byte{}, enc...), 'x'), []byte("not encoded at all")} {
			_, _, err := Decode(c, bad, 1<<20)
			if err == nil {
				continue // some text is valid raw deflate by accident
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "not valid "+c.String()+": ") {
				t.Errorf("%v: %q does not start by naming the coding", c, msg)
			}
			for _, p := range []string{"gzip", "deflate", "flate", "zlib", "zstd"} {
				if n := strings.Count(msg, p); n > 1 || (n == 1 && p != c.String() && !(c.String() == "deflate" && p == "flate")) {
					t.Errorf("%v: %q names %s again", c, msg, p)
				}
			}
			if strings.Contains(msg, "corrupt encoded body") || strings.Contains(msg, "EOF") {
				t.Errorf("%v: %q", c, msg)
			}
		}
	}
	_, _, err := Decode(Gzip, []byte("not gzip at all"), 1<<20)
	if err == nil || err.Error() != "not valid gzip: invalid header" {
		t.Errorf("a body that is not gzip: %v", err)
	}
	// Whole members, then bytes that start none: data after the end, as
	// the deflate codings say, not data cut short (a probe's newline after
	// a gzip body read "the data ends early").
	enc, _ := Encode(Gzip, plain)
	for _, tail := range []string{"\n", "0123456789abcdef", "\x1f"} {
		_, _, err = Decode(Gzip, append(append(append([]byte{}, enc...), enc...), tail...), 1<<20)
		if err == nil || err.Error() != "not valid gzip: data after the end of the stream" {
			t.Errorf("two members and %q: %v", tail, err)
		}
	}
	if _, _, err = Decode(Gzip, append(append([]byte{}, enc...), enc[:10]...), 1<<20); err == nil || err.Error() != "not valid gzip: the data ends early" {
		t.Errorf("a member, then a second cut short: %v", err)
	}
	_, _, err = Decode(Zstd, []byte("not zstd at all"), 1<<20)
	if err == nil || err.Error() != "not valid zstd: invalid input: magic number mismatch" {
		t.Errorf("a body that is not zstd: %v", err)
	}
}
