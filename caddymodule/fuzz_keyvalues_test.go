package caddymodule

import (
	"encoding/json"
	"math/big"
	"strconv"
	"testing"
)

// FuzzKeyNumbers proves that a keying dimension accepts at most one
// spelling of each number, the one strconv.FormatInt writes, so two
// spellings a reader takes for one id (42, 42.0, 4.2e1, 042, -0) never
// count as two recipients, and that every number it accepts is one every
// JSON reader holds exactly (|n| < 2^53).
func FuzzKeyNumbers(f *testing.F) {
	for _, s := range []string{"42", "42.0", "4.2e1", "042", "-0", "0", "-7", "9007199254740991", "9007199254740992",
		"-9007199254740991", "1e2", "100", "18446744073709551616", "0.5", "+1", " 1", "1_000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if !digitsInteger(s) {
			return
		}
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			t.Fatalf("%q accepted, yet not an int64: %v", s, err)
		}
		if canon := strconv.FormatInt(n, 10); canon != s {
			t.Fatalf("%q accepted beside its canonical spelling %q", s, canon)
		}
		if n > maxExactInt || n < -maxExactInt {
			t.Fatalf("%q accepted past 2^53-1", s)
		}
		// As a JSON number every reader sees the same integer.
		var v json.Number
		if err := json.Unmarshal([]byte(s), &v); err != nil {
			t.Fatalf("%q accepted, yet not a JSON number: %v", s, err)
		}
		r, ok := new(big.Rat).SetString(s)
		if !ok || !r.IsInt() || float64(n) != func() float64 { x, _ := strconv.ParseFloat(s, 64); return x }() {
			t.Fatalf("%q accepted, yet a float64 reader holds it differently", s)
		}
	})
}
