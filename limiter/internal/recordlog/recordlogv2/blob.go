package recordlogv2

import (
	"encoding/binary"
	"errors"
	"fmt"
)

// This file is the Redis store's value format in Go: one Redis string packs
// the sub-logs of one key, exactly as lua/freqcap.lua reads and writes it
// (the script's header describes the layout). The Go decision path reads a
// value into a keyLogs, decides as the memory store does, and writes it back;
// the script can take over any value at any time, and the other way round.

const (
	// subHeaderLen is a sub-log header after its id's terminating zero:
	// retention s (3), flags (1), entry count (2), tomb count (2), newest (6).
	subHeaderLen = 3 + 1 + 2 + 2 + 6
	flagWeighted = 1
	flagFloor    = 2
	// wideRetentionS is the retention (s) above which gaps take 6 bytes.
	WideRetentionS = 4294967
	MaxEntries     = 1<<16 - 1
	// MaxCost is the most units one record (an entry: one admission, or
	// a bucket of them) holds: a weighted log keeps costs in 4 bytes.
	MaxCost = 1<<32 - 1
)

var errCorrupt = errors.New("corrupt log value")

// errStore and errClockSkew are limiter.ErrStore and limiter.ErrClockSkew,
// made here because the record logs return them and limiter imports this.
var (
	ErrStore     = errors.New("frequency cap store failed")
	ErrClockSkew = errors.New("store clock is more than a calendar period away from the gateway clock")
)

// gapSize is the width of a gap for a retention in s.
func gapSize(retS int64) int {
	if retS > WideRetentionS {
		return 6
	}
	return 4
}

func getUint(b []byte, n int) int64 {
	var v int64
	for i := n - 1; i >= 0; i-- {
		v = v<<8 | int64(b[i])
	}
	return v
}

// DecodeBlob reads a value into k.subs (entries oldest first), reusing k's
// buffers. The ids refer to b. It prunes nothing: the caller prunes at its
// now.
func DecodeBlob(b []byte, k *KeyLogs) error {
	k.Subs = k.Subs[:0]
	for len(b) > 0 {
		nul := -1
		for i, c := range b {
			if c == 0 {
				nul = i
				break
			}
		}
		if nul < 0 || len(b) < nul+1+subHeaderLen {
			return errCorrupt
		}
		id := b[:nul]
		h := b[nul+1:]
		retS, flags := getUint(h, 3), h[3]
		n, nt, newest := int(getUint(h[4:], 2)), int(getUint(h[6:], 2)), getUint(h[8:], 6)
		b = h[subHeaderLen:]
		gs := gapSize(retS)
		need := max(n-1, 0)*gs + nt*6
		if flags&flagWeighted != 0 {
			need += n * 4
		}
		if flags&flagFloor != 0 {
			need += 6
		}
		if len(b) < need || flags&^(flagWeighted|flagFloor) != 0 {
			return errCorrupt
		}
		k.Subs = k.grow()
		l := &k.Subs[len(k.Subs)-1]
		l.Id = id
		l.Retention = retS * 1000
		l.Entries, l.tombs, l.floor = l.Entries[:0], l.tombs[:0], 0
		if n > 0 {
			l.Entries = append(l.Entries, make([]Entry, n)...)
			t := newest
			l.Entries[n-1] = Entry{T: t, C: 1}
			for i := 1; i < n; i++ {
				t -= getUint(b, gs)
				b = b[gs:]
				l.Entries[n-1-i] = Entry{T: t, C: 1}
			}
			if flags&flagWeighted != 0 {
				for i := 0; i < n; i++ {
					l.Entries[n-1-i].C = getUint(b, 4)
					b = b[4:]
				}
			}
		}
		for i := 0; i < nt; i++ {
			l.tombs = append(l.tombs, getUint(b, 6))
			b = b[6:]
		}
		if flags&flagFloor != 0 {
			l.floor = getUint(b, 6)
			b = b[6:]
		}
	}
	return nil
}

// EncodeBlob appends k's sub-logs as one value; empty ones are left out.
func EncodeBlob(dst []byte, k *KeyLogs) ([]byte, error) {
	for i := range k.Subs {
		l := &k.Subs[i]
		if l.empty() {
			continue
		}
		n := len(l.Entries)
		if l.Retention/1000 >= 1<<24 {
			return dst, fmt.Errorf("%w: sub-log %q keeps records %d s, at most %d", ErrStore, l.Id, l.Retention/1000, 1<<24-1)
		}
		if n > MaxEntries || len(l.tombs) > MaxEntries {
			return dst, fmt.Errorf("%w: sub-log %q holds %d records, at most %d", ErrStore, l.Id, n, MaxEntries)
		}
		var flags byte
		for _, e := range l.Entries {
			if e.C < 0 || e.C > MaxCost {
				return dst, fmt.Errorf("%w: sub-log %q holds a record of %d units, outside 0..%d", ErrStore, l.Id, e.C, MaxCost)
			}
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
	return dst, nil
}

// AppendUint appends the n low bytes of v, little-endian.
func AppendUint(b []byte, v uint64, n int) []byte {
	for i := 0; i < n; i++ {
		b = append(b, byte(v>>(8*i)))
	}
	return b
}
