package jsonbatch

import (
	"strings"
	"testing"
)

// wellFormedCases are documents at the edges of each rule Valid enforces:
// grammar, numbers, literals, escapes, control characters, UTF-8,
// nesting and repeated names (also spelled differently).
var wellFormedCases = []string{
	``, ` `, `1`, `-0`, `-`, `01`, `1.`, `.5`, `1.5e`, `1e+`, `1E-7`, `-0.0e0`, `2.`, `+1`, `0x1`, `1 2`,
	`true`, `tru`, `truex`, `false`, `null`, `nul`, `nullnull`, `NaN`,
	`""`, `"`, `"\"`, `"\\"`, `"\/\b\f\n\r\t"`, `"\a"`, `"\u00e9"`, `"\u00G9"`, `"\u12"`, `"\ud800"`, "\"a\tb\"", "\"a\x00\"", "\"a\x7f\"",
	"\"\xc3\xa9\"", "\"\xc3\"", "\"\xed\xa0\x80\"", "\"\xef\xbf\xbd\"", "\"\xf4\x90\x80\x80\"", "\xc3\xa9", "[1]\xff",
	`[]`, `[ ]`, `[,]`, `[1,]`, `[1 2]`, `[1,,2]`, `[}`, `{]`, `{}`, `{ }`, `{,}`, `{"a"}`, `{"a":}`, `{"a":1,}`, `{"a" 1}`, `{1:2}`,
	`{"a":1}}`, `[[]]]`, `[[]`, `{"a":[}]}`, " \t\r\n[\r\n1\t]\n ", "\v1", "\u00a01",
	`{"a":1,"a":2}`, `{"a":1,"\u0061":2}`, `{"\ud800":1,"\udfff":2}`, `{"a":{"a":1},"b":{"a":1}}`, `[{"a":1},{"a":2}]`,
	`{"a":1,"b":2,"c":3,"d":4,"e":5,"f":6,"g":7,"h":8,"i":9,"j":10,"k":11,"l":12,"m":13,"n":14,"o":15,"p":16,"q":17,"a":18}`,
	strings.Repeat("[", 10000) + strings.Repeat("]", 10000),
	strings.Repeat("[", 10001) + strings.Repeat("]", 10001),
	strings.Repeat(`{"a":`, 10000) + "1" + strings.Repeat("}", 10000),
	strings.Repeat(`{"a":`, 10001) + "1" + strings.Repeat("}", 10001),
}

// TestWellFormed proves that Valid's one-pass check gives the old checks'
// verdict (diagnose: utf8.Valid, encoding/json.Valid and the repeated
// name scan) on every edge case, so that Valid accepts and refuses the
// same documents as before.
func TestWellFormed(t *testing.T) {
	docs := wellFormedCases
	for _, s := range fuzzSeeds {
		docs = append(docs, s.doc)
	}
	for _, doc := range docs {
		want := diagnose([]byte(doc))
		if got := wellFormed([]byte(doc)); got != (want == nil) {
			t.Errorf("%.60q: wellFormed %v, the old checks say %v", doc, got, want)
		}
	}
}

// FuzzWellFormed holds the one-pass check to the old checks' verdict on
// any bytes.
func FuzzWellFormed(f *testing.F) {
	for _, doc := range wellFormedCases {
		if len(doc) < 1000 {
			f.Add([]byte(doc))
		}
	}
	for _, s := range fuzzSeeds {
		f.Add([]byte(s.doc))
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		want := diagnose(doc)
		if got := wellFormed(doc); got != (want == nil) {
			t.Fatalf("%q: wellFormed %v, the old checks say %v", doc, got, want)
		}
	})
}
