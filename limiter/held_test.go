package limiter

import (
	"strings"
	"testing"
)

// Every value survives the trip into a sub-log id and back, whatever bytes
// it holds; a value over MaxValueLen comes back as its hash.
func TestParseSubRoundTrip(t *testing.T) {
	r := &Rule{Name: "r", By: []string{"recipient", "content", "channel"}, Weight: "a$b"}
	for _, v := range []string{"", "plain", "#abc", "a&b=c$d#e%f{g}", "\x00\x7f é", strings.Repeat("x", MaxValueLen), strings.Repeat("y", MaxValueLen+1)} {
		sub := SubOf(r, []string{"ignored", v, "sms"})
		h, err := parseSub(sub)
		if err != nil {
			t.Fatalf("%q: %v", sub, err)
		}
		want := v
		if len(v) > MaxValueLen {
			want = string(appendValue(nil, v))
		}
		if h.Values["content"] != want || h.Values["channel"] != "sms" || h.Weight != "a$b" || (len(h.Hashed) == 1) != (len(v) > MaxValueLen) {
			t.Errorf("%q: %+v", v, h)
		}
	}
	for _, bad := range []string{"content", "content=%2", "content=%G0", "=x"} {
		if _, err := parseSub(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

// A long value as a listing shows it ("#" and its hash), given back as a
// value marked as in its stored form (support staff pasting it), keys
// where the long value does, in a key and in a log id alike; unmarked, as
// traffic sends it, it is escaped as any value starting with "#", so no
// sent value passes for the hash of another.
func TestStoredFormKeysAsTheValue(t *testing.T) {
	long := strings.Repeat("a long message text ", 10)
	shown := StoredForm(long)
	if !IsStoredHash(shown) {
		t.Fatalf("%q is not a stored hash", shown)
	}
	if a, b := string(appendKey(nil, "p:", "content", long, false)), string(appendKey(nil, "p:", "content", shown, true)); a != b {
		t.Errorf("key %q, from the shown form %q", a, b)
	}
	r := &Rule{Name: "r", By: []string{"recipient", "content"}}
	if a, b := string(appendSub(nil, r, []string{"ann", long}, 0)), string(appendSub(nil, r, []string{"ann", shown}, 1<<1)); a != b {
		t.Errorf("log id %q, from the shown form %q", a, b)
	}
	if KeyFor("p:", "content", shown) == KeyFor("p:", "content", long) || SubOf(r, []string{"ann", shown}) == SubOf(r, []string{"ann", long}) {
		t.Error("an unmarked value passes for the hash of another")
	}
	for _, v := range []string{"#abc", "#" + strings.Repeat("A", 32), "#" + strings.Repeat("0", 31)} {
		if IsStoredHash(v) || !strings.HasPrefix(string(appendValueAs(nil, v, true)), "%23") {
			t.Errorf("%q keys as %q", v, appendValueAs(nil, v, true))
		}
	}
}
