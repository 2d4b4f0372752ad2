package limiter

import (
	"crypto/sha256"
	"encoding/hex"
	"reflect"
	"strings"
	"testing"
	"time"
)

// Seed corpora live in testdata/fuzz/<FuzzName>/ and run with every plain
// `go test`; `go test -run='^$' -fuzz='^<FuzzName>$' -fuzztime=100000x
// ./limiter/` searches further (a count rather than a duration: Go 1.26's
// fuzz coordinator can report a spurious "context deadline exceeded" when a
// duration runs out, golang/go#75804).

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
			if err != nil || s[i+1:i+3] != strings.ToUpper(s[i+1:i+3]) || !needsEscape(x[0]) {
				return "", false
			}
			b.WriteByte(x[0])
			i += 2
			continue
		}
		if needsEscape(c) {
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
	if len(v) > MaxValueLen {
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
	two := func(weight string) *Rule {
		return &Rule{Name: "r", By: []string{"recipient", "content"}, Limit: 1, Window: Window{Duration: time.Second}, Weight: weight}
	}
	f.Fuzz(func(t *testing.T, a1, b1, w1, a2, b2, w2 string) {
		type tuple struct{ a, b, w string }
		tuples := [2]tuple{{a1, b1, w1}, {a2, b2, w2}}
		var ids [2]string
		for i, tu := range tuples {
			key := keyFor(prefix, "recipient", tu.a)
			sub := subOf(two(tu.w), []string{tu.a, tu.b})
			first, second, weight := keyParts(t, prefix, key, sub)
			checkValue(t, "recipient", tu.a, first)
			checkValue(t, "content", tu.b, second)
			if tu.w != "" {
				checkValue(t, "weight", tu.w, weight)
			} else if strings.Contains(sub, "$") {
				t.Fatalf("sub-log %q of an unweighted rule has a weight", sub)
			}
			one := &Rule{Name: "one", By: []string{"recipient"}, Limit: 1, Window: Window{Duration: time.Second}, Weight: tu.w}
			if k := keyFor(prefix, one.By[0], tu.a); k != key {
				t.Fatalf("1- and 2-dimension rules over %q use keys %q and %q", tu.a, k, key)
			}
			if s1 := subOf(one, []string{tu.a}); s1 == sub {
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

// decodeID never panics on any input. When it accepts one, what it decoded
// encodes to an id that decodes to the same records, and that encoding is
// a fixed point (encode(decode(encode(r))) == encode(r)).
func FuzzDecodeID(f *testing.F) {
	f.Add(encodeID([]recorded{{key: "fc:recipient{alice}", sub: "", grain: 0, t: 1700000000000, c: 1}}))
	f.Add(encodeID([]recorded{
		{key: "k{x}", sub: "content=a;b,c:d", grain: 1000, t: 1, c: 7},
		{key: "k{y}", sub: "$w", grain: 0, t: 9223372036854775807, c: 0},
	}))
	f.Add("")
	f.Add("3:abc0:0,1,1")
	f.Add("99999999999999999999:a")
	f.Add("-1:0:0,0,0;")
	f.Fuzz(func(t *testing.T, s string) {
		recs, err := decodeID(s)
		if err != nil {
			if recs != nil {
				t.Fatalf("decodeID(%q) returned records with error %v", s, err)
			}
			return
		}
		if len(recs) == 0 {
			t.Fatalf("decodeID(%q) accepted an id with no records", s)
		}
		enc := encodeID(recs)
		again, err := decodeID(enc)
		if err != nil || !reflect.DeepEqual(again, recs) {
			t.Fatalf("decodeID(%q) = %+v, encoded %q, decoded again %+v, %v", s, recs, enc, again, err)
		}
		if enc2 := encodeID(again); enc2 != enc {
			t.Fatalf("encoding is not a fixed point: %q then %q", enc, enc2)
		}
		for _, r := range recs {
			if r.grain < 0 || r.t < 0 || r.c < 0 {
				t.Fatalf("decodeID(%q) accepted a negative number: %+v", s, r)
			}
		}
	})
}
