package recordlog

import (
	"bytes"
	"testing"
)

// decodeBlob reads what encodeBlob writes, for every kind of sub-log the
// script writes: plain, weighted, with tombs, with a floor, wide gaps.
func TestBlobRoundTrip(t *testing.T) {
	k := KeyLogs{Subs: []namedLog{
		{Id: []byte(""), SubLog: SubLog{Retention: 86_400_000, Entries: []Entry{{1000, 1}, {5000, 1}, {9000, 1}}}},
		{Id: []byte("content=x"), SubLog: SubLog{Retention: 59_000, Entries: []Entry{{7000, 3}, {8000, 1}}, tombs: []int64{7500}}},
		{Id: []byte("$coins"), SubLog: SubLog{Retention: 100 * 86_400_000, Entries: []Entry{{1, 2}, {90 * 86_400_000, 5}}, floor: 1}},
		{Id: []byte("gone"), SubLog: SubLog{Retention: 1000, floor: 42}},
	}}
	blob, err := EncodeBlob(nil, &k)
	if err != nil {
		t.Fatal(err)
	}
	var got KeyLogs
	if err := DecodeBlob(blob, &got); err != nil {
		t.Fatal(err)
	}
	again, _ := EncodeBlob(nil, &got)
	if !bytes.Equal(blob, again) || len(got.Subs) != len(k.Subs) {
		t.Fatalf("round trip changed the value:\n%x\n%x", blob, again)
	}
	for i := range k.Subs {
		a, b := &k.Subs[i], &got.Subs[i]
		if !bytes.Equal(a.Id, b.Id) || a.Retention != b.Retention || a.floor != b.floor || len(a.Entries) != len(b.Entries) || len(a.tombs) != len(b.tombs) {
			t.Fatalf("sub-log %d: %+v became %+v", i, a, b)
		}
		for j := range a.Entries {
			if a.Entries[j] != b.Entries[j] {
				t.Fatalf("sub-log %d entry %d: %v became %v", i, j, a.Entries[j], b.Entries[j])
			}
		}
	}
}

// A value that is not a log (truncated, or anything at all) is an error,
// never a panic; what decodes encodes back to the same bytes' meaning.
func FuzzDecodeBlob(f *testing.F) {
	k := KeyLogs{Subs: []namedLog{{Id: []byte("c=1"), SubLog: SubLog{Retention: 60_000, Entries: []Entry{{10, 1}, {20, 4}}, tombs: []int64{15}, floor: 5}}}}
	good, _ := EncodeBlob(nil, &k)
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add([]byte("x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var k KeyLogs
		if DecodeBlob(b, &k) != nil {
			return
		}
		again, err := EncodeBlob(nil, &k)
		if err != nil {
			return
		}
		var k2 KeyLogs
		if err := DecodeBlob(again, &k2); err != nil {
			t.Fatalf("re-encoded value does not decode: %v", err)
		}
		third, _ := EncodeBlob(nil, &k2)
		if !bytes.Equal(again, third) {
			t.Fatalf("encoding is not stable:\n%x\n%x", again, third)
		}
	})
}
