package redisstore

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// Seed corpora live in testdata/fuzz/<FuzzName>/ and run with every plain
// `go test`; `go test -run='^$' -fuzz='^<FuzzName>$' -fuzztime=100000x
// ./limiter/` searches further (a count rather than a duration: Go 1.26's
// fuzz coordinator can report a spurious "context deadline exceeded" when a
// duration runs out, golang/go#75804).

// escapedByte reports whether a stored value must escape c: the hash tag's
// braces, the separators of a sub-log id (& = $), the hash marker #, the
// escape % itself, and space, control bytes and DEL.
func escapedByte(c byte) bool {
	switch c {
	case '{', '}', '&', '=', '$', '#', '%':
		return true
	}
	return c < 0x21 || c == 0x7f
}

// unescapeValue inverts appendValue for a value of at most MaxValueLen
// bytes; ok is false when s is not a well-formed escaped value.
func unescapeValue(s string) (string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' {
			if i+2 >= len(s) {
				return "", false
			}
			x, err := hex.DecodeString(s[i+1 : i+3])
			if err != nil || s[i+1:i+3] != strings.ToUpper(s[i+1:i+3]) || !escapedByte(x[0]) {
				return "", false
			}
			b.WriteByte(x[0])
			i += 2
			continue
		}
		if escapedByte(c) {
			return "", false
		}
		b.WriteByte(c)
	}
	return b.String(), true
}

// checkValue reports whether escaped is what appendValue must make of v:
// v itself, escaped and recoverable, or '#' and the first 128 bits of its
// SHA-256 for a long value.
func checkValue(t *testing.T, what, v, escaped string) {
	t.Helper()
	if len(v) > limiter.MaxValueLen {
		sum := sha256.Sum256([]byte(v))
		if want := "#" + hex.EncodeToString(sum[:16]); escaped != want {
			t.Fatalf("%s: long value %q became %q, want %q", what, v, escaped, want)
		}
		return
	}
	got, ok := unescapeValue(escaped)
	if !ok || got != v {
		t.Fatalf("%s: value %q became %q, which reads back as %q (ok=%v)", what, v, escaped, got, ok)
	}
}

// keyParts splits a key and a 2-dimension sub-log back into their escaped
// values, or fails the test when their structure is not the documented
// layout.
func keyParts(t *testing.T, prefix, key, sub string) (first, second, weight string) {
	t.Helper()
	rest, ok := strings.CutPrefix(key, prefix+"recipient{")
	if !ok || !strings.HasSuffix(rest, "}") {
		t.Fatalf("key %q does not have the layout %srecipient{...}", key, prefix)
	}
	first = rest[:len(rest)-1]
	if strings.ContainsAny(first, "{}") {
		t.Fatalf("key %q: the hash tag %q holds a brace", key, first)
	}
	if tag := hashTag(key); first != "" && tag != first {
		t.Fatalf("key %q: hash tag %q, want the escaped first value %q", key, tag, first)
	}
	rest, ok = strings.CutPrefix(sub, "content=")
	if !ok {
		t.Fatalf("sub-log %q does not start with content=", sub)
	}
	second, weight, _ = strings.Cut(rest, "$")
	if strings.ContainsAny(second, "&=$") || strings.ContainsAny(weight, "&=$") {
		t.Fatalf("sub-log %q has a separator inside a value", sub)
	}
	return first, second, weight
}

// No two distinct (recipient, content) tuples of a 2-dimension rule, with
// or without a weight, map to the same key and sub-log: every key and
// sub-log splits back into escaped values at the documented separators, and
// each escaped value reads back as the original (or is the SHA-256 of a
// value over 64 bytes). Values may be huge, invalid UTF-8, or full of
// separators, braces and escapes. The key's hash tag is exactly the escaped
// recipient, so every rule about one recipient lands in one slot, and a
// 1-dimension rule over the same recipient shares the key but never a
// sub-log with the 2-dimension one.
func FuzzKeysInjective(f *testing.F) {
	f.Add("alice", "hi", "", "alice", "hi", "{json.amount}")
	f.Add("a}b{c", "x&y=z", "", "a%7Db%7Bc", "x%26y%3Dz", "")
	f.Add("a", "b$w", "", "a", "b", "w")
	f.Add(strings.Repeat("x", 65), "", "", strings.Repeat("x", 64), "", "")
	f.Add("#abc", "%", "$", "%23abc", "%25", "%24")
	f.Add("\xff\xfe{", "\x00", "\x7f", "\xff\xfe", "{\x00", "")
	const prefix = "fc:"
	two := func(weight string) *limiter.Rule {
		return &limiter.Rule{Name: "r", By: []string{"recipient", "content"}, Limit: 1, Window: limiter.Window{Duration: time.Second}, Weight: weight}
	}
	f.Fuzz(func(t *testing.T, a1, b1, w1, a2, b2, w2 string) {
		type tuple struct{ a, b, w string }
		tuples := [2]tuple{{a1, b1, w1}, {a2, b2, w2}}
		var ids [2]string
		for i, tu := range tuples {
			key := limiter.KeyFor(prefix, "recipient", tu.a)
			sub := limiter.SubOf(two(tu.w), []string{tu.a, tu.b})
			first, second, weight := keyParts(t, prefix, key, sub)
			checkValue(t, "recipient", tu.a, first)
			checkValue(t, "content", tu.b, second)
			if tu.w != "" {
				checkValue(t, "weight", tu.w, weight)
			} else if strings.Contains(sub, "$") {
				t.Fatalf("sub-log %q of an unweighted rule has a weight", sub)
			}
			one := &limiter.Rule{Name: "one", By: []string{"recipient"}, Limit: 1, Window: limiter.Window{Duration: time.Second}, Weight: tu.w}
			if k := limiter.KeyFor(prefix, one.By[0], tu.a); k != key {
				t.Fatalf("1- and 2-dimension rules over %q use keys %q and %q", tu.a, k, key)
			}
			if s1 := limiter.SubOf(one, []string{tu.a}); s1 == sub {
				t.Fatalf("1- and 2-dimension rules share sub-log %q", sub)
			}
			ids[i] = key + "\x00" + sub
		}
		if tuples[0] != tuples[1] && ids[0] == ids[1] {
			// Only a SHA-256 collision could get here.
			t.Fatalf("%q and %q share key and sub-log %q", tuples[0], tuples[1], ids[0])
		}
	})
}
