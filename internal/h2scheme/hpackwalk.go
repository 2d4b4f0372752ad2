package h2scheme

import (
	"errors"

	"golang.org/x/net/http2/hpack"
)

// The wrapper never re-encodes a header block: it copies the client's
// representations byte for byte and rewrites only the literals that
// carry a scheme to fix (RFC 7541 §6). The server's dynamic table then
// holds the client's entries in the client's order, each fixed entry one
// byte shorter. So the server's table is never fuller than the client's,
// evicts no entry before the client does, and every index the client
// sends names, in the server's table, the same entry (fixed where it was
// defined by a rewritten literal). The client's table size updates pass
// as they are, and the bound holds for them too.

var errBadBlock = errors.New("h2scheme: a header block the decoder took does not parse")

// transcode appends the header block src to dst with the value of each
// literal field representation whose number (among field
// representations, in order; table size updates are not fields) is in
// fixed written as fields[number].Value, a raw string. An indexed field
// in fixed is copied: it names an entry that a rewritten literal defined.
func transcode(dst, src []byte, fields []hpack.HeaderField, fixed []int) ([]byte, error) {
	k := 0 // the field representation's number
	for p := src; len(p) > 0; {
		start := len(src) - len(p)
		var ok bool
		switch b := p[0]; {
		case b&0x80 != 0: // indexed
			_, p, ok = readInt(p, 7)
		case b&0xe0 == 0x20: // dynamic table size update: no field
			if _, p, ok = readInt(p, 5); !ok {
				return nil, errBadBlock
			}
			dst = append(dst, src[start:len(src)-len(p)]...)
			continue
		default: // a literal: 01 (6-bit name index) or 0000/0001 (4-bit)
			prefix := uint(4)
			if b&0xc0 == 0x40 {
				prefix = 6
			}
			var name uint64
			if name, p, ok = readInt(p, prefix); ok && name == 0 {
				p, ok = skipString(p)
			}
			if !ok {
				return nil, errBadBlock
			}
			valueAt := len(src) - len(p)
			if p, ok = skipString(p); ok && len(fixed) > 0 && fixed[0] == k {
				if k >= len(fields) {
					return nil, errBadBlock
				}
				dst = append(dst, src[start:valueAt]...)
				dst = appendString(dst, fields[k].Value)
				fixed, k = fixed[1:], k+1
				continue
			}
		}
		if !ok {
			return nil, errBadBlock
		}
		if len(fixed) > 0 && fixed[0] == k {
			fixed = fixed[1:]
		}
		dst = append(dst, src[start:len(src)-len(p)]...)
		k++
	}
	if k != len(fields) || len(fixed) != 0 {
		return nil, errBadBlock
	}
	return dst, nil
}

// readInt reads an integer with an n-bit prefix (RFC 7541 §5.1).
func readInt(p []byte, n uint) (uint64, []byte, bool) {
	if len(p) == 0 {
		return 0, p, false
	}
	mask := byte(1<<n - 1)
	v := uint64(p[0] & mask)
	p = p[1:]
	if v < uint64(mask) {
		return v, p, true
	}
	for m := uint(0); len(p) > 0 && m < 63; m += 7 {
		b := p[0]
		p = p[1:]
		v += uint64(b&0x7f) << m
		if b&0x80 == 0 {
			return v, p, true
		}
	}
	return 0, p, false
}

// skipString steps over a string literal (RFC 7541 §5.2).
func skipString(p []byte) ([]byte, bool) {
	n, rest, ok := readInt(p, 7)
	if !ok || n > uint64(len(rest)) {
		return p, false
	}
	return rest[n:], true
}

// appendString appends s as a raw (not Huffman-coded) string literal.
func appendString(dst []byte, s string) []byte {
	n := uint64(len(s))
	if n < 127 {
		dst = append(dst, byte(n))
	} else {
		dst = append(dst, 127)
		for n -= 127; n >= 128; n >>= 7 {
			dst = append(dst, byte(n&0x7f|0x80))
		}
		dst = append(dst, byte(n))
	}
	return append(dst, s...)
}
