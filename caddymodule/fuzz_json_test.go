package caddymodule

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

// fzJSONWant is what {json.<path>} must give for a body, worked out
// independently of extract.go: the path is walked over json.RawMessage, so
// the value found is the exact text the sender wrote.
type fzJSONWant struct {
	reject bool   // the body must be answered 400
	found  bool   // the path leads to a value other than null
	value  string // a string's text, a number or true/false as sent
	raw    []byte // an object or array as sent (compared by meaning)
}

// fzWantJSON says what extraction of path from body must give. A body is
// refused when it is not one valid JSON value, is not UTF-8 (RFC 8259
// §8.1; decoding would turn distinct bytes into one U+FFFD), or repeats a
// name inside an object (parsers disagree on which one counts, so a sender
// could be counted under one recipient and delivered to another). No body,
// or JSON's white space alone, is no document: it has no field.
func fzWantJSON(body []byte, path string) fzJSONWant {
	if len(bytes.Trim(body, " \t\r\n")) == 0 {
		return fzJSONWant{} // no body (JSON's white space at most): no field
	}
	if !utf8.Valid(body) || !json.Valid(body) || fzHasDuplicateNames(body) {
		return fzJSONWant{reject: true}
	}
	if path == "" {
		return fzJSONWant{}
	}
	raw := bytes.TrimSpace(body)
	for seg := range strings.SplitSeq(path, ".") {
		switch raw[0] {
		case '{':
			var m map[string]json.RawMessage
			if err := json.Unmarshal(raw, &m); err != nil {
				panic(err)
			}
			next, ok := m[seg]
			if !ok {
				return fzJSONWant{}
			}
			raw = bytes.TrimSpace(next)
		case '[':
			var a []json.RawMessage
			if err := json.Unmarshal(raw, &a); err != nil {
				panic(err)
			}
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(a) {
				return fzJSONWant{}
			}
			raw = bytes.TrimSpace(a[i])
		default:
			return fzJSONWant{}
		}
	}
	switch raw[0] {
	case 'n':
		return fzJSONWant{}
	case '"':
		var s string
		if err := json.Unmarshal(raw, &s); err != nil {
			panic(err)
		}
		return fzJSONWant{found: true, value: s}
	case '{', '[':
		return fzJSONWant{found: true, raw: raw}
	}
	return fzJSONWant{found: true, value: string(raw)}
}

// fzHasDuplicateNames reports whether some object in the valid JSON body
// names a member twice (after unescaping: "a" and "\u0061" are one name).
func fzHasDuplicateNames(body []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	// One entry per open object or array: the names seen (nil for an
	// array) and whether the next token of an object is a name.
	type level struct {
		names  map[string]bool
		isName bool
	}
	var stack []level
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return false
		}
		if err != nil {
			panic(err)
		}
		top := len(stack) - 1
		if top >= 0 && stack[top].names != nil {
			if stack[top].isName {
				if d, ok := tok.(json.Delim); ok && d == '}' {
					stack = stack[:top]
					continue
				}
				name := tok.(string)
				if stack[top].names[name] {
					return true
				}
				stack[top].names[name] = true
				stack[top].isName = false
				continue
			}
			stack[top].isName = true
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, level{names: map[string]bool{}, isName: true})
		case json.Delim('['):
			stack = append(stack, level{})
		case json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
	}
}

// fzSameJSON reports whether two JSON texts are the same value.
func fzSameJSON(a, b []byte) bool {
	decode := func(raw []byte) (any, error) {
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var v any
		err := dec.Decode(&v)
		return v, err
	}
	va, erra := decode(a)
	vb, errb := decode(b)
	return erra == nil && errb == nil && reflect.DeepEqual(va, vb)
}

// FuzzJSONBody feeds any body, path and max_body to the {json.<path>}
// extraction. It never panics; it reads at most max_body+1 bytes and hands
// on exactly the body sent (fzReadBody); and the value it finds is the one
// worked out independently by fzWantJSON: a string's exact text (so
// distinct strings never give one value), a number exactly as sent, an
// object or array as JSON of the same meaning, and nothing for null or a
// path that leads nowhere. Bodies that are not valid JSON, not UTF-8, or
// repeat a name in an object are refused with 400; deeper nesting than
// encoding/json allows is refused, never a stack overflow.
func FuzzJSONBody(f *testing.F) {
	f.Add([]byte(`{"to":"alice","content":"hi"}`), "to", uint32(0), false)
	f.Add([]byte(`{"message":{"to":["bob","carol"]}}`), "message.to.1", uint32(0), true)
	f.Add([]byte(`{"n":1.50e+3}`), "n", uint32(13), false)
	f.Add([]byte(`{"to":"a","to":"b"}`), "to", uint32(0), false)
	f.Add([]byte("{\"to\":\"\xff\"}"), "to", uint32(0), false)
	deep := append(bytes.Repeat([]byte("["), 10001), bytes.Repeat([]byte("]"), 10001)...)
	f.Add(deep, "0.0.0", uint32(0), false)
	deepObj := append(bytes.Repeat([]byte(`{"a":`), 500), append([]byte("1"), bytes.Repeat([]byte("}"), 500)...)...)
	f.Add(deepObj, strings.Repeat("a.", 499)+"a", uint32(0), true)
	big := append(append([]byte(`{"to":"`), bytes.Repeat([]byte("x"), 70000)...), `"}`...)
	f.Add(big, "to", uint32(65536), true)
	f.Add(big, "to", uint32(len(big)), false)
	f.Add(big, "to", uint32(len(big)-1), false)

	f.Fuzz(func(t *testing.T, data []byte, path string, maxBody uint32, chunked bool) {
		want := fzWantJSON(data, path)
		b, fail := fzReadBody(t, data, needJSON, fzMaxBody(maxBody), chunked)
		if b == nil {
			if fail.Status == http.StatusBadRequest && !want.reject {
				t.Fatalf("body %q refused (%s), want it accepted", data, fail.Reason)
			}
			return
		}
		if want.reject {
			t.Fatalf("body %q accepted, want 400", data)
		}
		got, _ := fzPlaceholder(t, b, "json.", path)
		switch {
		case !want.found:
			if got != "" {
				t.Fatalf("{json.%s} of %q = %q, want nothing", path, data, got)
			}
		case want.raw != nil:
			if !fzSameJSON([]byte(got), want.raw) {
				t.Fatalf("{json.%s} of %q = %q, want JSON meaning %s", path, data, got, want.raw)
			}
		case got != want.value:
			t.Fatalf("{json.%s} of %q = %q, want %q", path, data, got, want.value)
		}
	})
}
