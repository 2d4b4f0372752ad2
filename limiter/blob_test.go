package limiter

import (
	"bytes"
	"testing"
)

// decodeBlob reads what encodeBlob writes, for every kind of sub-log the
// script writes: plain, weighted, with tombs, with a floor, wide gaps.
func TestBlobRoundTrip(t *testing.T) {
	k := keyLogs{subs: []namedLog{
		{id: []byte(""), subLog: subLog{retention: 86_400_000, entries: []entry{{1000, 1}, {5000, 1}, {9000, 1}}}},
		{id: []byte("content=x"), subLog: subLog{retention: 59_000, entries: []entry{{7000, 3}, {8000, 1}}, tombs: []int64{7500}}},
		{id: []byte("$coins"), subLog: subLog{retention: 100 * 86_400_000, entries: []entry{{1, 2}, {90 * 86_400_000, 5}}, floor: 1}},
		{id: []byte("gone"), subLog: subLog{retention: 1000, floor: 42}},
	}}
	blob, err := encodeBlob(nil, &k)
	if err != nil {
		t.Fatal(err)
	}
	var got keyLogs
	if err := decodeBlob(blob, &got); err != nil {
		t.Fatal(err)
	}
	again, _ := encodeBlob(nil, &got)
	if !bytes.Equal(blob, again) || len(got.subs) != len(k.subs) {
		t.Fatalf("round trip changed the value:\n%x\n%x", blob, again)
	}
	for i := range k.subs {
		a, b := &k.subs[i], &got.subs[i]
		if !bytes.Equal(a.id, b.id) || a.retention != b.retention || a.floor != b.floor || len(a.entries) != len(b.entries) || len(a.tombs) != len(b.tombs) {
			t.Fatalf("sub-log %d: %+v became %+v", i, a, b)
		}
		for j := range a.entries {
			if a.entries[j] != b.entries[j] {
				t.Fatalf("sub-log %d entry %d: %v became %v", i, j, a.entries[j], b.entries[j])
			}
		}
	}
}

// A value that is not a log (truncated, or anything at all) is an error,
// never a panic; what decodes encodes back to the same bytes' meaning.
func FuzzDecodeBlob(f *testing.F) {
	k := keyLogs{subs: []namedLog{{id: []byte("c=1"), subLog: subLog{retention: 60_000, entries: []entry{{10, 1}, {20, 4}}, tombs: []int64{15}, floor: 5}}}}
	good, _ := encodeBlob(nil, &k)
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add([]byte("x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var k keyLogs
		if decodeBlob(b, &k) != nil {
			return
		}
		again, err := encodeBlob(nil, &k)
		if err != nil {
			return
		}
		var k2 keyLogs
		if err := decodeBlob(again, &k2); err != nil {
			t.Fatalf("re-encoded value does not decode: %v", err)
		}
		third, _ := encodeBlob(nil, &k2)
		if !bytes.Equal(again, third) {
			t.Fatalf("encoding is not stable:\n%x\n%x", again, third)
		}
	})
}
