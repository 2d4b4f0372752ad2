package limiter

import (
	"crypto/sha256"
	"encoding/hex"
)

// MaxValueLen is the longest dimension value kept verbatim in a key; a
// longer one is replaced by a hash of it, so keys stay short whatever the
// senders put in a field.
const MaxValueLen = 64

// KeyFor returns the store key of a rule's first dimension value.
func KeyFor(prefix, dim, value string) string {
	return string(appendKey(nil, prefix, dim, value, false))
}

// SubOf returns the sub-log id of a rule's dimensions after the first.
func SubOf(r *Rule, values []string) string { return string(appendSub(nil, r, values, 0)) }

// appendKey appends the key of a first dimension value to dst; stored: the
// value may be given in its stored form (see Check.StoredForms).
func appendKey(dst []byte, prefix, dim, value string, stored bool) []byte {
	dst = append(dst, prefix...)
	dst = append(dst, dim...)
	dst = append(dst, '{')
	dst = appendValueAs(dst, value, stored)
	return append(dst, '}')
}

// appendValueAs is appendValue, but a value given in its stored form (a
// long value's "#" and hash, as a listing shows it) is kept as it is when
// stored says it may be.
func appendValueAs(dst []byte, v string, stored bool) []byte {
	if stored && IsStoredHash(v) {
		return append(dst, v...)
	}
	return appendValue(dst, v)
}

// appendSub appends the sub-log id of a rule's dimensions after the first
// (name=value pairs sorted by name, so that rules over the same set share
// it whatever order they list them in) and of its weight.
func appendSub(dst []byte, r *Rule, values []string, stored uint64) []byte {
	n := len(r.By) - 1
	var stack [8]int
	order := stack[:0]
	if n > len(stack) {
		order = make([]int, 0, n)
	}
	for i := 1; i <= n; i++ { // insertion sort: n is small
		order = append(order, i)
		for j := len(order) - 1; j > 0 && r.By[order[j-1]] > r.By[order[j]]; j-- {
			order[j-1], order[j] = order[j], order[j-1]
		}
	}
	for k, i := range order {
		if k > 0 {
			dst = append(dst, '&')
		}
		dst = append(dst, r.By[i]...)
		dst = append(dst, '=')
		dst = appendValueAs(dst, values[i], i < 64 && stored&(1<<i) != 0)
	}
	if r.Weight != "" {
		dst = append(dst, '$')
		dst = appendValue(dst, r.Weight)
	}
	return dst
}

// appendValue appends v escaped, or '#' and a 128-bit hash of it when it is
// longer than MaxValueLen.
func appendValue(dst []byte, v string) []byte {
	if len(v) > MaxValueLen {
		sum := sha256.Sum256([]byte(v))
		dst = append(dst, '#')
		return hex.AppendEncode(dst, sum[:16])
	}
	// Values are nearly always plain (ids, hashes): copy up to the first
	// byte to escape in one piece.
	i := 0
	for i < len(v) && !needsEscape(v[i]) {
		i++
	}
	dst = append(dst, v[:i]...)
	for ; i < len(v); i++ {
		c := v[i]
		if needsEscape(c) {
			dst = append(dst, '%', hexDigits[c>>4], hexDigits[c&15])
			continue
		}
		dst = append(dst, c)
	}
	return dst
}

const hexDigits = "0123456789ABCDEF"

func needsEscape(c byte) bool { return escaped[c] }

// escaped is, for each byte, whether a key or sub-log id escapes it: the
// separators of keys, ids and admission ids, controls, space and DEL.
var escaped = func() (t [256]bool) {
	for c := range t {
		t[c] = c < 0x21 || c == 0x7f
	}
	for _, c := range "{}&=$#%" {
		t[c] = true
	}
	return t
}()

// IsStoredHash reports whether v is a long value as the store keeps it:
// "#" and the 32 lower-case hex digits of its hash.
func IsStoredHash(v string) bool {
	if len(v) != 33 || v[0] != '#' {
		return false
	}
	for i := 1; i < len(v); i++ {
		if c := v[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
