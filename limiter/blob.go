package limiter

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
	wideRetentionS = 4294967
	maxEntries     = 1<<16 - 1
)

var errCorrupt = errors.New("corrupt log value")

// gapSize is the width of a gap for a retention in s.
func gapSize(retS int64) int {
	if retS > wideRetentionS {
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

// decodeBlob reads a value into k.subs (entries oldest first), reusing k's
// buffers. The ids refer to b. It prunes nothing: the caller prunes at its
// now.
func decodeBlob(b []byte, k *keyLogs) error {
	k.subs = k.subs[:0]
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
		k.subs = k.grow()
		l := &k.subs[len(k.subs)-1]
		l.id = id
		l.retention = retS * 1000
		l.entries, l.tombs, l.floor = l.entries[:0], l.tombs[:0], 0
		if n > 0 {
			l.entries = append(l.entries, make([]entry, n)...)
			t := newest
			l.entries[n-1] = entry{t: t, c: 1}
			for i := 1; i < n; i++ {
				t -= getUint(b, gs)
				b = b[gs:]
				l.entries[n-1-i] = entry{t: t, c: 1}
			}
			if flags&flagWeighted != 0 {
				for i := 0; i < n; i++ {
					l.entries[n-1-i].c = getUint(b, 4)
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

// encodeBlob appends k's sub-logs as one value; empty ones are left out.
func encodeBlob(dst []byte, k *keyLogs) ([]byte, error) {
	for i := range k.subs {
		l := &k.subs[i]
		if l.empty() {
			continue
		}
		n := len(l.entries)
		if l.retention/1000 >= 1<<24 {
			return dst, fmt.Errorf("%w: sub-log %q keeps records %d s, at most %d", ErrStore, l.id, l.retention/1000, 1<<24-1)
		}
		if n > maxEntries || len(l.tombs) > maxEntries {
			return dst, fmt.Errorf("%w: sub-log %q holds %d records, at most %d", ErrStore, l.id, n, maxEntries)
		}
		var flags byte
		for _, e := range l.entries {
			if e.c != 1 {
				flags |= flagWeighted
				break
			}
		}
		if l.floor > 0 {
			flags |= flagFloor
		}
		retS := l.retention / 1000
		var newest int64
		if n > 0 {
			newest = l.entries[n-1].t
		}
		dst = append(dst, l.id...)
		dst = append(dst, 0)
		dst = appendUint(dst, uint64(retS), 3)
		dst = append(dst, flags)
		dst = binary.LittleEndian.AppendUint16(dst, uint16(n))
		dst = binary.LittleEndian.AppendUint16(dst, uint16(len(l.tombs)))
		dst = appendUint(dst, uint64(newest), 6)
		gs := gapSize(retS)
		for j := n - 1; j > 0; j-- {
			dst = appendUint(dst, uint64(l.entries[j].t-l.entries[j-1].t), gs)
		}
		if flags&flagWeighted != 0 {
			for j := n - 1; j >= 0; j-- {
				dst = binary.LittleEndian.AppendUint32(dst, uint32(l.entries[j].c))
			}
		}
		for _, t := range l.tombs {
			dst = appendUint(dst, uint64(t), 6)
		}
		if l.floor > 0 {
			dst = appendUint(dst, uint64(l.floor), 6)
		}
	}
	return dst, nil
}
