package jsonbatch

import (
	"strings"
	"testing"
)

func TestValid(t *testing.T) {
	for _, tc := range []struct {
		doc string
		err string
	}{
		{`[{"to":"a"}]`, ""},
		{" \n{\"a\":1}\t", ""},
		{`{"a":{"b":1},"b":{"b":2}}`, ""},
		{"", "empty"},
		{" \r\n", "empty"},
		{`{"a":1} {"a":2}`, "invalid"},
		{`{"a":`, "unexpected end"},
		{"[\"\xff\"]", "not UTF-8"},
		{`{"to":"a","to":"b"}`, `names "to" twice`},
		{`[{"to":"a","t\u006f":"b"}]`, `names "to" twice`},
		{strings.Repeat("[", 10000) + strings.Repeat("]", 10000), ""},
		{strings.Repeat("[", 10001) + strings.Repeat("]", 10001), "exceeded max depth"},
	} {
		err := Valid([]byte(tc.doc))
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%.40q: %v", tc.doc, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%.40q: error %v, want one saying %q", tc.doc, err, tc.err)
		}
	}
}
