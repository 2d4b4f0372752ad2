package recordlog

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math/bits"
)

// This file is the Redis store's value format in Go: one Redis string packs
// the sub-logs of one key, exactly as lua/freqcap.lua reads and writes it
// (the script's header describes the layout). The Go decision path reads a
// value into a keyLogs, decides as the memory store does, and writes it back;
// the script can take over any value at any time, and the other way round.
//
// A sub-log is in one of two layouts, told apart by the byte four after its
// id's terminating zero (the flags of formats 1 and 2):
//
//   - format 1's (formats 1 and 2 write it): a fixed header of 14 bytes and
//     gaps of 4 bytes (6 past WideRetentionS). This version reads it, and
//     writes it no more.
//   - format 3's, compact: that byte has bit 128 set, and gaps take the
//     fewest bytes that hold the sub-log's largest. This version writes it.
//
// Format 3's header after the id and its zero: retention s (3), shape (1),
// the count's low byte (1), 0xf0 | gap width (1), newest (6), then the
// count's high byte when the shape says so, then the tomb count (2) when
// the shape says so. Then the n-1 gaps, newest first, in the gap width;
// when weighted, the n costs (4 each); the tombs (6 each); the floor (6).
// Exact: every record keeps its time to the ms.
//
// Readers of formats 1 and 2 refuse a format 3 sub-log: the Go decoders and
// format 2's script refuse a flags byte above 3. Format 1's script ignores
// those bits, so the shape always sets 1 and 2 (weighted, has a floor) and
// the width byte's high nibble is 0xf: that script reads a count of at
// least 61,440, weighted, and looks for the floor (or the tombs) past
// 491,000 bytes, which is an error on any value shorter than that.

const (
	// subHeaderLen is a format 1 sub-log header after its id's
	// terminating zero: retention s (3), flags (1), entry count (2),
	// tomb count (2), newest (6).
	subHeaderLen = 3 + 1 + 2 + 2 + 6
	flagWeighted = 1
	flagFloor    = 2
	// compactHeaderLen is a format 3 sub-log header after its id's zero,
	// without the optional count high byte and tomb count: retention s
	// (3), shape (1), count low byte (1), gap width (1), newest (6).
	compactHeaderLen = 3 + 1 + 1 + 1 + 6
	// A format 3 shape: shapeCompact and shapeTrap always, then what the
	// sub-log holds. shapeReserved is refused, left for a later layout.
	shapeCompact  = 0x80
	shapeTrap     = 0x03
	shapeWeighted = 0x04
	shapeFloor    = 0x08
	shapeTombs    = 0x10
	shapeWideN    = 0x20
	shapeReserved = 0x40
	// widthMark is the high nibble of a format 3 gap width byte.
	widthMark = 0xf0
	maxWidth  = 6
	// wideRetentionS is the retention (s) above which format 1's gaps
	// take 6 bytes.
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

// gapSize is the width of a format 1 gap for a retention in s.
func gapSize(retS int64) int {
	if retS > WideRetentionS {
		return 6
	}
	return 4
}

// gapWidth is the fewest bytes (at least 1) that hold gap.
func gapWidth(gap uint64) int { return max(1, (bits.Len64(gap)+7)/8) }

func getUint(b []byte, n int) int64 {
	var v int64
	for i := n - 1; i >= 0; i-- {
		v = v<<8 | int64(b[i])
	}
	return v
}

// DecodeBlob reads a value of any format into k.subs (entries oldest
// first), reusing k's buffers. The ids refer to b. It prunes nothing: the
// caller prunes at its now.
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
		if nul < 0 || len(b) < nul+1+compactHeaderLen {
			return errCorrupt
		}
		id := b[:nul]
		h := b[nul+1:]
		retS, shape := getUint(h, 3), h[3]
		var n, nt, gs int
		var newest int64
		var weighted, hasFloor bool
		if shape&shapeCompact != 0 {
			wb := h[5]
			n, gs, newest = int(h[4]), int(wb&^widthMark), getUint(h[6:], 6)
			h = h[compactHeaderLen:]
			if shape&(shapeTrap|shapeReserved) != shapeTrap || wb&widthMark != widthMark || gs > maxWidth {
				return errCorrupt
			}
			if shape&shapeWideN != 0 {
				if len(h) < 1 {
					return errCorrupt
				}
				n |= int(h[0]) << 8
				h = h[1:]
			}
			if shape&shapeTombs != 0 {
				if len(h) < 2 {
					return errCorrupt
				}
				nt = int(getUint(h, 2))
				h = h[2:]
			}
			if (n > 1) != (gs > 0) {
				return errCorrupt
			}
			weighted, hasFloor = shape&shapeWeighted != 0, shape&shapeFloor != 0
		} else {
			if len(h) < subHeaderLen || shape&^(flagWeighted|flagFloor) != 0 {
				return errCorrupt
			}
			n, nt, newest = int(getUint(h[4:], 2)), int(getUint(h[6:], 2)), getUint(h[8:], 6)
			h = h[subHeaderLen:]
			gs = gapSize(retS)
			weighted, hasFloor = shape&flagWeighted != 0, shape&flagFloor != 0
		}
		b = h
		need := max(n-1, 0)*gs + nt*6
		if weighted {
			need += n * 4
		}
		if hasFloor {
			need += 6
		}
		if len(b) < need {
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
			switch gs {
			case 3: // the width of most logs of minutes to hours
				for i := 1; i < n; i++ {
					t -= int64(b[0]) | int64(b[1])<<8 | int64(b[2])<<16
					b = b[3:]
					l.Entries[n-1-i] = Entry{T: t, C: 1}
				}
			default:
				for i := 1; i < n; i++ {
					t -= getUint(b, gs)
					b = b[gs:]
					l.Entries[n-1-i] = Entry{T: t, C: 1}
				}
			}
			if weighted {
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
		if hasFloor {
			l.floor = getUint(b, 6)
			b = b[6:]
		}
	}
	return nil
}

// EncodeBlob appends k's sub-logs as one value of format 3; empty ones are
// left out.
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
		shape := byte(shapeCompact | shapeTrap)
		var widest uint64
		for j, e := range l.Entries {
			if e.C < 0 || e.C > MaxCost {
				return dst, fmt.Errorf("%w: sub-log %q holds a record of %d units, outside 0..%d", ErrStore, l.Id, e.C, MaxCost)
			}
			if e.C != 1 {
				shape |= shapeWeighted
			}
			if j > 0 {
				widest = max(widest, uint64(e.T-l.Entries[j-1].T))
			}
		}
		var gs int
		var newest int64
		if n > 0 {
			newest = l.Entries[n-1].T
		}
		if n > 1 {
			if gs = gapWidth(widest); gs > maxWidth {
				return dst, fmt.Errorf("%w: sub-log %q holds records out of order", ErrStore, l.Id)
			}
		}
		if l.floor > 0 {
			shape |= shapeFloor
		}
		if len(l.tombs) > 0 {
			shape |= shapeTombs
		}
		if n > 0xff {
			shape |= shapeWideN
		}
		retS := l.Retention / 1000
		dst = append(dst, l.Id...)
		dst = append(dst, 0)
		dst = AppendUint(dst, uint64(retS), 3)
		dst = append(dst, shape, byte(n), widthMark|byte(gs))
		dst = AppendUint(dst, uint64(newest), 6)
		if n > 0xff {
			dst = append(dst, byte(n>>8))
		}
		if len(l.tombs) > 0 {
			dst = binary.LittleEndian.AppendUint16(dst, uint16(len(l.tombs)))
		}
		if gs == 3 {
			for j := n - 1; j > 0; j-- {
				g := l.Entries[j].T - l.Entries[j-1].T
				dst = append(dst, byte(g), byte(g>>8), byte(g>>16))
			}
		} else {
			for j := n - 1; j > 0; j-- {
				dst = AppendUint(dst, uint64(l.Entries[j].T-l.Entries[j-1].T), gs)
			}
		}
		if shape&shapeWeighted != 0 {
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
