package recordlog

import (
	"bytes"
	"testing"

	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog/recordlogv1"
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
// Format 1 (recordlogv1) reads every value format 2 reads, to the same
// records, so a gateway of the older version counts alike; and no record
// shows more exempt units than it holds, or fewer than none.
func FuzzDecodeBlob(f *testing.F) {
	k := KeyLogs{Subs: []namedLog{{Id: []byte("c=1"), SubLog: SubLog{Retention: 60_000, Entries: []Entry{{10, 1}, {20, 4}}, tombs: []int64{15}, floor: 5}}}}
	good, _ := EncodeBlob(nil, &k)
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add([]byte("x"))
	k.MarkExempt(AppendExemptID(nil, []byte("c=1")), 20, 3, 60_000, 0)
	marked, _ := EncodeBlob(nil, &k)
	f.Add(marked)
	f.Fuzz(func(t *testing.T, b []byte) {
		var k KeyLogs
		if DecodeBlob(b, &k) != nil {
			return
		}
		var k1 recordlogv1.KeyLogs
		if err := recordlogv1.DecodeBlob(b, &k1); err != nil || len(k1.Subs) != len(k.Subs) {
			t.Fatalf("format 1 reads %x apart: %v", b, err)
		}
		for i := range k.Subs {
			l, l1 := &k.Subs[i], &k1.Subs[i]
			if !bytes.Equal(l.Id, l1.Id) || len(l.Entries) != len(l1.Entries) {
				t.Fatalf("format 1 reads sub-log %d apart", i)
			}
			for j, e := range l.Entries {
				if e.T != l1.Entries[j].T || e.C != l1.Entries[j].C {
					t.Fatalf("format 1 reads sub-log %d entry %d as %v, format 2 as %v", i, j, l1.Entries[j], e)
				}
			}
			for _, grain := range []int64{0, 1000} {
				for j, x := range k.ExemptUnits(nil, l.Id, &l.SubLog, grain) {
					if x < 0 || x > l.Entries[j].C {
						t.Fatalf("sub-log %d entry %v shows %d exempt units", i, l.Entries[j], x)
					}
				}
			}
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
