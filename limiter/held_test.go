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
