package recordlog

import (
	"encoding/binary"
	"testing"

	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog/recordlogv1"
	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog/recordlogv2"
)

// appendFormat2 appends k's sub-logs in the layout of formats 1 and 2, as
// the previous version writes them (recordlogv2.EncodeBlob), so that tests
// can make the values a gateway of that version leaves in a store.
func appendFormat2(dst []byte, k *KeyLogs) []byte {
	for i := range k.Subs {
		l := &k.Subs[i]
		if l.empty() {
			continue
		}
		n := len(l.Entries)
		var flags byte
		for _, e := range l.Entries {
			if e.C != 1 {
				flags |= flagWeighted
			}
		}
		if l.floor > 0 {
			flags |= flagFloor
		}
		retS := l.Retention / 1000
		var newest int64
		if n > 0 {
			newest = l.Entries[n-1].T
		}
		dst = append(dst, l.Id...)
		dst = append(dst, 0)
		dst = AppendUint(dst, uint64(retS), 3)
		dst = append(dst, flags)
		dst = binary.LittleEndian.AppendUint16(dst, uint16(n))
		dst = binary.LittleEndian.AppendUint16(dst, uint16(len(l.tombs)))
		dst = AppendUint(dst, uint64(newest), 6)
		gs := gapSize(retS)
		for j := n - 1; j > 0; j-- {
			dst = AppendUint(dst, uint64(l.Entries[j].T-l.Entries[j-1].T), gs)
		}
		if flags&flagWeighted != 0 {
			for j := n - 1; j >= 0; j-- {
				dst = binary.LittleEndian.AppendUint32(dst, uint32(l.Entries[j].C))
			}
		}
		for _, t := range l.tombs {
			dst = AppendUint(dst, uint64(t), 6)
		}
		if l.floor > 0 {
			dst = AppendUint(dst, uint64(l.floor), 6)
		}
	}
	return dst
}

// oldReadersRefuse fails the test unless the Go decoders of formats 1 and
// 2 both refuse b.
func oldReadersRefuse(t *testing.T, b []byte) {
	t.Helper()
	var k1 recordlogv1.KeyLogs
	var k2 recordlogv2.KeyLogs
	if err := recordlogv1.DecodeBlob(b, &k1); err == nil {
		t.Fatalf("format 1 reads a value of format 3: %x", b)
	}
	if err := recordlogv2.DecodeBlob(b, &k2); err == nil {
		t.Fatalf("format 2 reads a value of format 3: %x", b)
	}
}

// sameLogs fails the test unless a and b hold the same sub-logs, records,
// tombs and floors.
func sameLogs(t *testing.T, a, b *KeyLogs) {
	t.Helper()
	if len(a.Subs) != len(b.Subs) {
		t.Fatalf("%d sub-logs became %d", len(a.Subs), len(b.Subs))
	}
	for i := range a.Subs {
		x, y := &a.Subs[i], &b.Subs[i]
		if string(x.Id) != string(y.Id) || x.Retention != y.Retention || x.floor != y.floor ||
			len(x.Entries) != len(y.Entries) || len(x.tombs) != len(y.tombs) {
			t.Fatalf("sub-log %d: %+v became %+v", i, x, y)
		}
		for j := range x.Entries {
			if x.Entries[j] != y.Entries[j] {
				t.Fatalf("sub-log %d entry %d: %v became %v", i, j, x.Entries[j], y.Entries[j])
			}
		}
		for j := range x.tombs {
			if x.tombs[j] != y.tombs[j] {
				t.Fatalf("sub-log %d tomb %d: %d became %d", i, j, x.tombs[j], y.tombs[j])
			}
		}
	}
}

// The frozen format 2 codec, for benchmarks beside this version's.
type recordlogv2KeyLogs = recordlogv2.KeyLogs

var (
	decodeV2 = recordlogv2.DecodeBlob
	encodeV2 = recordlogv2.EncodeBlob
)
