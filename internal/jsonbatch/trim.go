package jsonbatch

import (
	"strings"
	"unicode"
)

// TrimKey trims a value that keys counts (a recipient, an address) of
// what no address carries at its ends and readers drop or do not show:
// white space, control characters, format characters (Unicode's Cf: the
// zero-width space and joiners, direction marks and embeddings, the soft
// hyphen, the BOM) and the other default-ignorable code points (the
// combining grapheme joiner, variation selectors, Hangul fillers). So
// " dave", "dave\u200e" and "dave" are one recipient, as upstreams that
// trim or normalise read them.
func TrimKey(s string) string {
	return strings.TrimFunc(s, ignorable)
}

func ignorable(r rune) bool {
	switch {
	case unicode.IsSpace(r), unicode.IsControl(r), unicode.Is(unicode.Cf, r):
		return true
	case r == '\u034f', r == '\u115f', r == '\u1160', r == '\u3164', r == '\uffa0':
		return true // combining grapheme joiner, Hangul fillers
	case r >= '\u180b' && r <= '\u180f', r >= '\ufe00' && r <= '\ufe0f':
		return true // Mongolian and other variation selectors
	case r >= 0xe0100 && r <= 0xe01ef:
		return true // variation selectors supplement
	}
	return false
}
