package jsonbatch

import (
	"testing"
	"unicode/utf8"
)

// ignorableSamples are marks TrimKey drops, one of each kind it names.
var ignorableSamples = []string{" ", "\t", "\u00a0", "\x00", "\u200b", "\u200e", "\u202e", "\u00ad",
	"\ufeff", "\u034f", "\u115f", "\u3164", "\u180b", "\ufe0f", "\U000e0100", "\u2060"}

// FuzzTrimKey proves that TrimKey is a canonical form: trimming twice is
// trimming once, a trimmed value neither starts nor ends with a mark it
// drops, and a value padded with any of those marks on either side trims
// to what the value alone trims to, so padding never makes a recipient of
// its own. Bytes that are not UTF-8 are kept (they read as U+FFFD, not a
// mark), so two invalid spellings stay two.
func FuzzTrimKey(f *testing.F) {
	for _, s := range []string{"dave", " dave", "dave\u200e", "\ufeffdave\ufe0f", "", "\u200b", "a\u200bb", "\xffdave", "dave\xe2\x80"} {
		f.Add(s, uint8(0), uint8(3))
	}
	f.Fuzz(func(t *testing.T, s string, left, right uint8) {
		trimmed := TrimKey(s)
		if again := TrimKey(trimmed); again != trimmed {
			t.Fatalf("TrimKey(%q) = %q, and trimmed again %q", s, trimmed, again)
		}
		if trimmed != "" {
			first, _ := utf8.DecodeRuneInString(trimmed)
			last, _ := utf8.DecodeLastRuneInString(trimmed)
			if ignorable(first) || ignorable(last) {
				t.Fatalf("TrimKey(%q) = %q still ends with a mark it drops", s, trimmed)
			}
		}
		pad := func(n uint8) string {
			out := ""
			for i := 0; i < int(n%6); i++ {
				out += ignorableSamples[(int(n)+i*7)%len(ignorableSamples)]
			}
			return out
		}
		if padded := TrimKey(pad(left) + s + pad(right)); padded != trimmed {
			t.Fatalf("%q padded trims to %q, alone to %q", s, padded, trimmed)
		}
	})
}
