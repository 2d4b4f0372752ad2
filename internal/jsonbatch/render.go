package jsonbatch

import (
	"bytes"
	"encoding/json"
	"strings"
)

// Kind is the JSON type of a value found at a path.
type Kind uint8

// The kinds of value. Missing is the zero Kind: the path leads nowhere,
// or to null.
const (
	Missing Kind = iota
	String
	Number
	Bool
	Object
	Array
)

var kindNames = [...]string{"missing", "string", "number", "bool", "object", "array"}

// String names the kind, as in "string" or "missing".
func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "invalid"
}

// Value is one value found at a path, rendered as {json.<path>} renders
// it: a string as its text, a number exactly as written, true or false,
// and an object or array as compact JSON with its members sorted (so the
// same object sent with its members in another order is one value). The
// zero Value is Missing.
type Value struct {
	Text string
	Kind Kind
}

// kindAt returns the kind of the value starting at b[i].
func kindAt(b []byte, i int) Kind {
	switch at(b, i) {
	case '"':
		return String
	case '{':
		return Object
	case '[':
		return Array
	case 't', 'f':
		return Bool
	case 'n', 0:
		return Missing
	}
	return Number
}

// appendRendered appends the text of the value b[start:end] of kind k to
// dst. A string without escapes and a number are copied as they are; a
// string with escapes is unquoted; an object or array is decoded and
// marshalled again, as {json.<path>} does, so that both agree.
func appendRendered(dst, b []byte, start, end int, k Kind) []byte {
	v := b[start:end]
	switch k {
	case String:
		if len(v) < 2 {
			return dst // cut short: the document was not valid after all
		}
		if bytes.IndexByte(v, '\\') < 0 {
			return append(dst, v[1:len(v)-1]...)
		}
		return append(dst, unquote(v)...)
	case Object, Array:
		dec := json.NewDecoder(bytes.NewReader(v))
		dec.UseNumber()
		var x any
		if dec.Decode(&x) != nil {
			return dst
		}
		out, err := json.Marshal(x)
		if err != nil {
			return dst
		}
		return append(dst, out...)
	}
	return append(dst, v...)
}

// unquote returns the text of the quoted JSON string s.
func unquote(s []byte) string {
	var out string
	_ = json.Unmarshal(s, &out) // valid: the caller checked the document
	return out
}

// texts builds rendered values cheaply: each value's text is appended to
// one builder, whose string is made without a copy, so a batch of n
// values costs the builder's buffer and the ends rather than n strings.
type texts struct {
	buf  strings.Builder
	ends []int
}

// add renders the value b[start:end] of kind k and returns its number.
func (t *texts) add(b []byte, start, end int, k Kind) int {
	v := b[start:end]
	if k == String && len(v) >= 2 && bytes.IndexByte(v, '\\') < 0 {
		t.buf.Write(v[1 : len(v)-1]) // most values: no copy in between
	} else {
		t.buf.Write(appendRendered(nil, b, start, end, k))
	}
	t.ends = append(t.ends, t.buf.Len())
	return len(t.ends) - 1
}

// missing adds an empty text, for a value that is missing.
func (t *texts) missing() {
	t.ends = append(t.ends, t.buf.Len())
}

// each calls fn with the number and text of every value added, in order.
func (t *texts) each(fn func(i int, text string)) {
	all := t.buf.String()
	from := 0
	for i, end := range t.ends {
		fn(i, all[from:end])
		from = end
	}
}
