package recordlog

import (
	"bytes"
	"fmt"
	"math/rand"
	"slices"
	"testing"

	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog/recordlogv1"
	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog/recordlogv2"
)

// decodeBlob reads what encodeBlob writes, for every kind of sub-log the
// script writes: plain, weighted, with tombs, with a floor, wide gaps, more
// than 255 records; and the readers of formats 1 and 2 refuse it.
func TestBlobRoundTrip(t *testing.T) {
	long := make([]Entry, 300)
	for i := range long {
		long[i] = Entry{T: int64(1_000_000 + i*i*997), C: 1}
	}
	k := KeyLogs{Subs: []namedLog{
		{Id: []byte(""), SubLog: SubLog{Retention: 86_400_000, Entries: []Entry{{1000, 1}, {5000, 1}, {9000, 1}}}},
		{Id: []byte("content=x"), SubLog: SubLog{Retention: 59_000, Entries: []Entry{{7000, 3}, {8000, 1}}, tombs: []int64{7500}}},
		{Id: []byte("$coins"), SubLog: SubLog{Retention: 100 * 86_400_000, Entries: []Entry{{1, 2}, {90 * 86_400_000, 5}}, floor: 1}},
		{Id: []byte("gone"), SubLog: SubLog{Retention: 1000, floor: 42}},
		{Id: []byte("one"), SubLog: SubLog{Retention: 1000, Entries: []Entry{{1_700_000_000_000, 1}}}},
		{Id: []byte("long"), SubLog: SubLog{Retention: 86_400_000, Entries: long, tombs: []int64{5, 6}}},
	}}
	blob, err := EncodeBlob(nil, &k)
	if err != nil {
		t.Fatal(err)
	}
	var got KeyLogs
	if err := DecodeBlob(blob, &got); err != nil {
		t.Fatal(err)
	}
	sameLogs(t, &k, &got)
	again, _ := EncodeBlob(nil, &got)
	if !bytes.Equal(blob, again) {
		t.Fatalf("round trip changed the value:\n%x\n%x", blob, again)
	}
	oldReadersRefuse(t, blob)
	// Each sub-log alone starts a value, and is refused alone too.
	for i := range k.Subs {
		one := KeyLogs{Subs: k.Subs[i : i+1]}
		b, _ := EncodeBlob(nil, &one)
		oldReadersRefuse(t, b)
	}
}

// A value that is not a log (truncated, or anything at all) is an error,
// never a panic; what decodes encodes back to the same bytes' meaning, in
// format 3, which the Go readers of formats 1 and 2 refuse. A value in the
// layout of formats 1 and 2 alone reads as the frozen readers of both read
// it, to the same records.
func FuzzDecodeBlob(f *testing.F) {
	k := KeyLogs{Subs: []namedLog{{Id: []byte("c=1"), SubLog: SubLog{Retention: 60_000, Entries: []Entry{{10, 1}, {20, 4}}, tombs: []int64{15}, floor: 5}}}}
	good, _ := EncodeBlob(nil, &k)
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add([]byte("x"))
	f.Add(appendFormat2(nil, &k))
	k.MarkExempt(AppendExemptID(nil, []byte("c=1")), 20, 3, 60_000, 0)
	marked, _ := EncodeBlob(nil, &k)
	f.Add(marked)
	f.Add(appendFormat2(nil, &k))
	f.Add(append(appendFormat2(nil, &k), good...))
	f.Fuzz(func(t *testing.T, b []byte) {
		var k KeyLogs
		if DecodeBlob(b, &k) != nil {
			return
		}
		var k1 recordlogv1.KeyLogs
		var k2 recordlogv2.KeyLogs
		err1, err2 := recordlogv1.DecodeBlob(b, &k1), recordlogv2.DecodeBlob(b, &k2)
		if hasCompact(b) {
			if err1 == nil || err2 == nil {
				t.Fatalf("a format 3 sub-log read by format 1 (%v) or 2 (%v): %x", err1, err2, b)
			}
		} else {
			if err1 != nil || err2 != nil || len(k1.Subs) != len(k.Subs) || len(k2.Subs) != len(k.Subs) {
				t.Fatalf("formats 1 and 2 read %x apart: %v, %v", b, err1, err2)
			}
			for i := range k.Subs {
				l, l1, l2 := &k.Subs[i], &k1.Subs[i], &k2.Subs[i]
				if !bytes.Equal(l.Id, l1.Id) || !bytes.Equal(l.Id, l2.Id) || len(l.Entries) != len(l1.Entries) || len(l.Entries) != len(l2.Entries) {
					t.Fatalf("formats 1 and 2 read sub-log %d apart", i)
				}
				for j, e := range l.Entries {
					if e.T != l1.Entries[j].T || e.C != l1.Entries[j].C || e.T != l2.Entries[j].T || e.C != l2.Entries[j].C {
						t.Fatalf("sub-log %d entry %d: format 1 reads %v, format 2 %v, this version %v", i, j, l1.Entries[j], l2.Entries[j], e)
					}
				}
			}
		}
		for i := range k.Subs {
			l := &k.Subs[i]
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
		var k3 KeyLogs
		if err := DecodeBlob(again, &k3); err != nil {
			t.Fatalf("re-encoded value does not decode: %v", err)
		}
		kept := k
		kept.Subs = slices.DeleteFunc(slices.Clone(k.Subs), func(l namedLog) bool { return l.empty() })
		sameLogs(t, &kept, &k3)
		if len(again) > 0 {
			oldReadersRefuse(t, again)
		}
		third, _ := EncodeBlob(nil, &k3)
		if !bytes.Equal(again, third) {
			t.Fatalf("encoding is not stable:\n%x\n%x", again, third)
		}
	})
}

// hasCompact reports whether a value this version reads holds a sub-log
// of format 3: it walks the sub-logs of format 1's layout before it.
func hasCompact(b []byte) bool {
	for len(b) > 0 {
		nul := bytes.IndexByte(b, 0)
		h := b[nul+1:]
		if h[3]&shapeCompact != 0 {
			return true
		}
		n, nt, flags := int(getUint(h[4:], 2)), int(getUint(h[6:], 2)), h[3]
		size := subHeaderLen + max(n-1, 0)*gapSize(getUint(h, 3)) + nt*6
		if flags&flagWeighted != 0 {
			size += n * 4
		}
		if flags&flagFloor != 0 {
			size += 6
		}
		b = h[size:]
	}
	return false
}

// logsFrom makes the sub-logs a fuzz input describes: valid ones, with
// every kind of content the stores make (costs, tombs, floors, gaps of 1
// to 5 bytes, up to 511 records).
func logsFrom(b []byte) *KeyLogs {
	rng := rand.New(rand.NewSource(int64(len(b))))
	next := func() byte {
		if len(b) == 0 {
			return byte(rng.Intn(256))
		}
		c := b[0]
		b = b[1:]
		return c
	}
	k := &KeyLogs{}
	for s := int(next() % 4); s >= 0; s-- {
		id := []byte(fmt.Sprintf("c=%d", next()))
		if k.Find(id) != nil {
			continue
		}
		l := k.Sub(id)
		l.Retention = []int64{1000, 59_000, 3_540_000, 86_400_000, 16_777_215_000}[next()%5]
		n := int(next())
		if next()%8 == 0 {
			n += int(next()) + 1
		}
		t := int64(1_700_000_000_000)
		weighted := next()%4 == 0
		for i := 0; i < n; i++ {
			w := int(next()%6) + 1
			gap := int64(1)
			for j := 0; j < w; j++ {
				gap = gap<<8 | int64(next())
			}
			// A log holds no two records further apart than its
			// retention, which format 2's gap widths rely on.
			gap = (gap&(1<<(8*w)-1))%l.Retention + 1
			t += gap
			c := int64(1)
			if weighted {
				c = int64(next()) << (next() % 25)
			}
			l.Entries = append(l.Entries, Entry{T: t, C: c})
		}
		for i := int(next() % 3); i > 0; i-- {
			l.tombs = append(l.tombs, t+int64(next())+1)
		}
		if next()%3 == 0 {
			l.floor = int64(next()) + 1
		}
	}
	return k
}

// Every log encodes to format 3 and decodes back to the same records,
// tombs and floor, the encoding stable; the readers of formats 1 and 2
// refuse it; and this version reads the same logs written in the layout of
// formats 1 and 2 (as the frozen format 2 codec writes them) alike.
func FuzzBlobRoundTrip(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{3, 1, 2, 0, 20, 3, 9, 1, 0, 7})
	f.Add(bytes.Repeat([]byte{0xff, 0x80, 0x01}, 100))
	f.Fuzz(func(t *testing.T, b []byte) {
		k := logsFrom(b)
		blob, err := EncodeBlob(nil, k)
		if err != nil {
			t.Fatal(err)
		}
		var got KeyLogs
		if err := DecodeBlob(blob, &got); err != nil {
			t.Fatalf("%x: %v", blob, err)
		}
		want := *k
		want.Subs = slices.DeleteFunc(slices.Clone(k.Subs), func(l namedLog) bool { return l.empty() })
		sameLogs(t, &want, &got)
		if again, _ := EncodeBlob(nil, &got); !bytes.Equal(blob, again) {
			t.Fatalf("encoding is not stable:\n%x\n%x", blob, again)
		}
		if len(blob) > 0 {
			oldReadersRefuse(t, blob)
		}
		old := appendFormat2(nil, k)
		var k2 recordlogv2.KeyLogs
		if err := recordlogv2.DecodeBlob(old, &k2); err != nil {
			t.Fatalf("format 2 does not read its own layout %x: %v", old, err)
		}
		if again, _ := recordlogv2.EncodeBlob(nil, &k2); !bytes.Equal(again, old) {
			t.Fatalf("appendFormat2 wrote what format 2 does not:\n%x\n%x", old, again)
		}
		var fromOld KeyLogs
		if err := DecodeBlob(old, &fromOld); err != nil {
			t.Fatalf("format 2's %x: %v", old, err)
		}
		sameLogs(t, &want, &fromOld)
	})
}
