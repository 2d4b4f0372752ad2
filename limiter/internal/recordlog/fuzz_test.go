package recordlog

import (
	"reflect"
	"testing"
)

// Seed corpora live in testdata/fuzz/<FuzzName>/ and run with every plain
// `go test`; `go test -run='^$' -fuzz='^<FuzzName>$' -fuzztime=100000x
// ./limiter/` searches further (a count rather than a duration: Go 1.26's
// fuzz coordinator can report a spurious "context deadline exceeded" when a
// duration runs out, golang/go#75804).

// decodeID never panics on any input. When it accepts one, what it decoded
// encodes to an id that decodes to the same records, and that encoding is
// a fixed point (encode(decode(encode(r))) == encode(r)).
func FuzzDecodeID(f *testing.F) {
	f.Add(EncodeID([]Recorded{{Key: "fc:recipient{alice}", Sub: "", Grain: 0, T: 1700000000000, C: 1}}))
	f.Add(EncodeID([]Recorded{
		{Key: "k{x}", Sub: "content=a;b,c:d", Grain: 1000, T: 1, C: 7},
		{Key: "k{y}", Sub: "$w", Grain: 0, T: 9223372036854775807, C: 0},
	}))
	f.Add("")
	f.Add("3:abc0:0,1,1")
	f.Add("99999999999999999999:a")
	f.Add("-1:0:0,0,0;")
	f.Fuzz(func(t *testing.T, s string) {
		recs, err := DecodeID(s)
		if err != nil {
			if recs != nil {
				t.Fatalf("decodeID(%q) returned records with error %v", s, err)
			}
			return
		}
		if len(recs) == 0 {
			t.Fatalf("decodeID(%q) accepted an id with no records", s)
		}
		enc := EncodeID(recs)
		again, err := DecodeID(enc)
		if err != nil || !reflect.DeepEqual(again, recs) {
			t.Fatalf("decodeID(%q) = %+v, encoded %q, decoded again %+v, %v", s, recs, enc, again, err)
		}
		if enc2 := EncodeID(again); enc2 != enc {
			t.Fatalf("encoding is not a fixed point: %q then %q", enc, enc2)
		}
		for _, r := range recs {
			if r.Grain < 0 || r.T < 0 || r.C < 0 {
				t.Fatalf("decodeID(%q) accepted a negative number: %+v", s, r)
			}
		}
	})
}
