package jsonbatch

import (
	"strings"
	"testing"
)

func TestParsePath(t *testing.T) {
	for _, tc := range []struct {
		path      string
		wildcards int
		err       string
	}{
		{"to", 0, ""},
		{"*.to", 1, ""},
		{"notifications.*.tokens.*", 2, ""},
		{"personalizations.*.to.*.email", 2, ""},
		{"*", 1, ""},
		{"a.0.*", 1, ""},
		{"**.to", 0, ""}, // a member named "**"
		{"", 0, "empty path"},
		{".to", 0, "empty segment"},
		{"to.", 0, "empty segment"},
		{"a..b", 0, "empty segment"},
		{strings.Repeat("a.", MaxSegments-1) + "a", 0, ""},
		{strings.Repeat("a.", MaxSegments) + "a", 0, "more than 64 segments"},
	} {
		p, err := ParsePath(tc.path)
		switch {
		case tc.err != "":
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: error %v, want one saying %q", tc.path, err, tc.err)
			}
		case err != nil:
			t.Errorf("%q: %v", tc.path, err)
		case p.Wildcards() != tc.wildcards || p.String() != tc.path:
			t.Errorf("%q: %d wildcards, String %q", tc.path, p.Wildcards(), p)
		}
	}
}

func TestConcrete(t *testing.T) {
	p := mustPath(t, "notifications.*.tokens.*")
	for _, tc := range []struct {
		idx  []int
		want string
	}{
		{nil, "notifications.*.tokens.*"},
		{[]int{3}, "notifications.3.tokens.*"},
		{[]int{3, 14}, "notifications.3.tokens.14"},
		{[]int{3, 14, 1}, "notifications.3.tokens.14.1"},
	} {
		if got := p.concrete(tc.idx); got != tc.want {
			t.Errorf("%v: %q, want %q", tc.idx, got, tc.want)
		}
	}
}
