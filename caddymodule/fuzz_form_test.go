package caddymodule

import (
	"bytes"
	"net/http"
	"strings"
	"testing"
)

// fzFormMaxFields is how many fields net/url parses at most (its
// urlmaxqueryparams default); a body with more is refused, as Go's own
// net/http refuses it.
const fzFormMaxFields = 10000

// fzWantForm says what {form.<field>} must give for an
// application/x-www-form-urlencoded body, worked out independently of
// net/url: fields split on '&', name and value on the first '=', '+' is a
// space and %XX a byte (any byte: a value need not be UTF-8). A body is
// refused when an escape is malformed, when it holds a ';' (some parsers
// split fields on it, so it could hide a second recipient from the cap;
// Go's net/http refuses it too), or when it has more than fzFormMaxFields
// fields. Of a repeated field the first counts, as with Go's
// url.Values.Get (TestBodyPassthrough relies on it).
func fzWantForm(body []byte, field string) (value string, reject bool) {
	s := string(body)
	if strings.Count(s, "&")+1 > fzFormMaxFields || strings.Contains(s, ";") {
		return "", true
	}
	var values []string
	for pair := range strings.SplitSeq(s, "&") {
		if pair == "" {
			continue
		}
		k, v, _ := strings.Cut(pair, "=")
		name, ok := fzFormUnescape(k)
		if !ok {
			return "", true
		}
		val, ok := fzFormUnescape(v)
		if !ok {
			return "", true
		}
		if name == field {
			values = append(values, val)
		}
	}
	if len(values) == 0 {
		return "", false
	}
	return values[0], false
}

func fzFormUnescape(s string) (string, bool) {
	const hex = "0123456789abcdef0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; c {
		case '+':
			b.WriteByte(' ')
		case '%':
			if i+2 >= len(s) {
				return "", false
			}
			hi := strings.IndexByte(hex, s[i+1])
			lo := strings.IndexByte(hex, s[i+2])
			if hi < 0 || lo < 0 {
				return "", false
			}
			b.WriteByte(byte(hi%16<<4 | lo%16))
			i += 2
		default:
			b.WriteByte(c)
		}
	}
	return b.String(), true
}

// FuzzFormBody feeds any body, field and max_body to the {form.<field>}
// extraction. It never panics; it reads at most max_body+1 bytes and hands
// on exactly the body sent (fzReadBody); and the value it finds is the one
// fzWantForm works out: the field's bytes exactly as percent-decoded, so
// distinct values never give one value, or nothing when the field is
// absent; bodies fzWantForm refuses are answered 400.
func FuzzFormBody(f *testing.F) {
	f.Add([]byte("to=alice&content=hi"), "to", uint32(0), false)
	f.Add([]byte("to=a%26b%3Dc&x=%7B%7D"), "to", uint32(0), true)
	f.Add([]byte("to=alice&to=bob"), "to", uint32(0), false)
	f.Add([]byte("to=%ff%00&x=y"), "to", uint32(0), false)
	f.Add([]byte("to=alice;to=bob"), "to", uint32(0), false)
	many := bytes.Repeat([]byte("k=v&"), fzFormMaxFields)
	f.Add(append(many, "to=alice"...), "to", uint32(0), false)
	f.Add(append([]byte("to="), bytes.Repeat([]byte("%7D"), 30000)...), "to", uint32(65536), true)

	f.Fuzz(func(t *testing.T, data []byte, field string, maxBody uint32, chunked bool) {
		want, reject := fzWantForm(data, field)
		b, fail := fzReadBody(t, data, needForm, fzMaxBody(maxBody), chunked)
		if b != nil {
			if reject {
				t.Fatalf("body %q accepted, want 400", data)
			}
			if got, _ := fzPlaceholder(t, b, "form.", field); got != want {
				t.Fatalf("{form.%s} of %q = %q, want %q", field, data, got, want)
			}
			return
		}
		if fail.Status == http.StatusBadRequest && !reject {
			t.Fatalf("body %q refused (%s), want {form.%s} = %q", data, fail.Reason, field, want)
		}
	})
}
