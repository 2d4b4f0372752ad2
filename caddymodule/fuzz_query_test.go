package caddymodule

import (
	"net/http"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"
)

// FuzzQueryParam proves that a query the gateway reads a parameter of
// reads the same to Python's parse_qs and Node's URLSearchParams, which
// split on "&", read "+" as a space and each byte that is no UTF-8 as
// U+FFFD: where the gateway admits the query (repeatedInRequest), the
// parameter occurs once there too, with the value the gateway counted. A
// query where they differ (a bad byte: carol%80 and carol%81 are one
// recipient upstream) must be refused, never counted as two.
func FuzzQueryParam(f *testing.F) {
	for _, q := range []string{"to=carol", "to=carol%80", "to=carol%EF%BF%BD", "to=a&to=b", "x=1;to=a", "to=a+b", "to=%2B1555",
		"t%6F=a", "to=a&%74o=b", "to=%zz", "to", "to=&to=", "to=%C3%A9", "to=%C3", "%80=1&to=a"} {
		f.Add(q)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r := &http.Request{URL: &url.URL{RawQuery: raw}, Header: http.Header{}}
		if repeatedInRequest(r, []string{"to"}, nil) != nil {
			return
		}
		got := r.URL.Query().Get("to")
		if !utf8.ValidString(got) {
			t.Fatalf("%q: counted %q, which is no UTF-8", raw, got)
		}
		var theirs []string
		for pair := range strings.SplitSeq(raw, "&") {
			k, v, _ := strings.Cut(pair, "=")
			if lenientUnescape(k) == "to" {
				theirs = append(theirs, lenientUnescape(v))
			}
		}
		if len(theirs) > 1 || len(theirs) == 1 && theirs[0] != got {
			t.Fatalf("%q: counted %q, upstream readers read %q", raw, got, theirs)
		}
	})
}

// lenientUnescape decodes as Python's unquote_plus with errors="replace"
// does: "+" is a space, a "%" without two hex digits stays, and the bytes
// are read as UTF-8, each bad one as U+FFFD.
func lenientUnescape(s string) string {
	var b []byte
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '+':
			b = append(b, ' ')
		case c == '%' && i+2 < len(s) && ishex(s[i+1]) && ishex(s[i+2]):
			b = append(b, unhex(s[i+1])<<4|unhex(s[i+2]))
			i += 2
		default:
			b = append(b, c)
		}
	}
	return strings.ToValidUTF8(string(b), "\ufffd")
}

func ishex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c <= '9':
		return c - '0'
	case c <= 'F':
		return c - 'A' + 10
	}
	return c - 'a' + 10
}
