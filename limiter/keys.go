package limiter

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// MaxValueLen is the longest dimension value kept verbatim in a key; a
// longer one is replaced by a hash of it, so keys stay short whatever the
// senders put in a field.
const MaxValueLen = 64

// Key layout. Every rule whose first dimension has the same name and value
// shares one store key, which holds one log per (remaining dimensions,
// weight) tuple:
//
//	key:    <prefix><first dimension name>{<escaped first value>}
//	sub-log: <name>=<escaped value>&<name>=<escaped value>...[$<escaped weight>]
//
// The braces make the first value the Redis Cluster hash tag. Escaped values
// never contain '{', '}', '&', '=', '$', '#' or '%' unescaped, dimension
// names cannot contain them either, and a hashed value starts with '#'; so
// no value can forge another tuple's key or sub-log.

// keyFor returns the store key of a rule's first dimension value.
func keyFor(prefix, dim, value string) string {
	var b strings.Builder
	b.Grow(len(prefix) + len(dim) + len(value) + 2)
	b.WriteString(prefix)
	b.WriteString(dim)
	b.WriteByte('{')
	writeValue(&b, value)
	b.WriteByte('}')
	return b.String()
}

// subFor returns the sub-log id of the remaining dimensions of a rule (their
// names in rule order, paired with values) and its weight.
func subFor(dims, values []string, weight string) string {
	if len(dims) == 0 && weight == "" {
		return ""
	}
	var b strings.Builder
	for i, d := range dims {
		if i > 0 {
			b.WriteByte('&')
		}
		b.WriteString(d)
		b.WriteByte('=')
		writeValue(&b, values[i])
	}
	if weight != "" {
		b.WriteByte('$')
		writeValue(&b, weight)
	}
	return b.String()
}

// writeValue writes v escaped, or '#' and a 128-bit hash of it when it is
// longer than MaxValueLen.
func writeValue(b *strings.Builder, v string) {
	if len(v) > MaxValueLen {
		sum := sha256.Sum256([]byte(v))
		b.WriteByte('#')
		b.WriteString(hex.EncodeToString(sum[:16]))
		return
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if needsEscape(c) {
			b.WriteByte('%')
			b.WriteByte(hexDigits[c>>4])
			b.WriteByte(hexDigits[c&15])
			continue
		}
		b.WriteByte(c)
	}
}

const hexDigits = "0123456789ABCDEF"

func needsEscape(c byte) bool {
	switch c {
	case '{', '}', '&', '=', '$', '#', '%':
		return true
	}
	return c < 0x21 || c == 0x7f
}
