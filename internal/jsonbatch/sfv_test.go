package jsonbatch

import "testing"

func TestSFStringList(t *testing.T) {
	for _, tc := range []struct {
		items []string
		want  string
		err   bool
	}{
		{nil, "", false},
		{[]string{"0.to"}, `"0.to"`, false},
		{[]string{"0.to.1", "notifications.1.tokens.0", "2.to"}, `"0.to.1", "notifications.1.tokens.0", "2.to"`, false},
		{[]string{`a"b`, `c\d`, ""}, `"a\"b", "c\\d", ""`, false},
		{[]string{" ~"}, `" ~"`, false},
		{[]string{"é"}, "", true},
		{[]string{"a\tb"}, "", true},
		{[]string{"ok", "a\x7f"}, "", true},
	} {
		got, err := SFStringList(tc.items)
		if got != tc.want || (err != nil) != tc.err {
			t.Errorf("%q: %q, %v; want %q, error %v", tc.items, got, err, tc.want, tc.err)
		}
	}
}
