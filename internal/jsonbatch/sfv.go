package jsonbatch

import (
	"fmt"
	"strings"
)

// SFStringList renders items as an RFC 8941 List of sf-strings, as the
// Frequency-Cap-Dropped header carries the dropped entries' paths:
// `"0.to", "notifications.1.tokens.0"`. Inside each string, `"` and `\`
// are escaped with a backslash. An sf-string holds only printable ASCII
// (0x20 to 0x7E), so any other byte is an error; a concrete path is made
// of its pattern's segments and decimal indices, so checking the pattern
// (SFStringList([]string{path.String()})) at config time rules this out.
// An empty list renders as "": the header is then left out (RFC 8941
// §3.1).
func SFStringList(items []string) (string, error) {
	var b strings.Builder
	for i, s := range items {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteByte('"')
		for j := 0; j < len(s); j++ {
			c := s[j]
			if c < 0x20 || c > 0x7e {
				return "", fmt.Errorf("%q cannot be an sf-string: byte %#x is not printable ASCII", s, c)
			}
			if c == '"' || c == '\\' {
				b.WriteByte('\\')
			}
			b.WriteByte(c)
		}
		b.WriteByte('"')
	}
	return b.String(), nil
}
