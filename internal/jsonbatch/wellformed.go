package jsonbatch

import (
	"bytes"
	"unicode/utf8"
)

// maxDepth is encoding/json's nesting limit (its maxNestingDepth): a
// document nested deeper is not valid to it, so not to Valid either.
const maxDepth = 10000

// wellFormed reports whether doc passes Valid, in one pass over its bytes:
// the JSON grammar, UTF-8 inside strings (outside them any byte that is
// not ASCII is a syntax error anyway), the nesting limit and the member
// names of each object, all at once. Valid used to make four passes for
// the same verdict (utf8.Valid, json.Valid, which also runs a state
// machine call per byte, and a duplicate-name scan), which made checking
// a batch cost more than enumerating its recipients.
//
// It is only the fast path of Valid: whatever it refuses, Valid asks the
// old checks again, which say why (and have the last word), so only its
// acceptance has to be exact. FuzzWellFormed holds it to their verdict.
func wellFormed(doc []byte) bool {
	type frame struct {
		object bool
		names  nameSet
	}
	var buf [8]frame
	stack := buf[:0]
	// push enters a container, reusing the names list a sibling left in
	// its slot: a batch of a thousand messages is a thousand objects, and
	// one list serves them all.
	push := func(object bool) {
		if len(stack) < cap(stack) {
			stack = stack[:len(stack)+1]
		} else {
			stack = append(stack, frame{})
		}
		f := &stack[len(stack)-1]
		f.object, f.names.list, f.names.set = object, f.names.list[:0], nil
	}
	// name reads the member name at doc[i] into the innermost object,
	// and the colon after it; it returns the start of the member's value.
	name := func(i int) (int, bool) {
		if at(doc, i) != '"' {
			return 0, false
		}
		end, escaped, ok := scanString(doc, i)
		if !ok {
			return 0, false
		}
		n := doc[i+1 : end-1]
		if escaped {
			n = []byte(unquote(doc[i:end])) // "a" and "\u0061" are one name
		}
		if !stack[len(stack)-1].names.add(n) {
			return 0, false
		}
		i = skipSpace(doc, end)
		if at(doc, i) != ':' {
			return 0, false
		}
		return skipSpace(doc, i+1), true
	}

	i := skipSpace(doc, 0)
values:
	for {
		// A value starts at doc[i].
		switch c := at(doc, i); c {
		case '{', '[':
			if len(stack) == maxDepth {
				return false
			}
			push(c == '{')
			i = skipSpace(doc, i+1)
			if at(doc, i) != c+2 { // '}' is '{'+2, ']' is '['+2
				if c == '{' {
					var ok bool
					if i, ok = name(i); !ok {
						return false
					}
				}
				continue values
			}
			stack = stack[:len(stack)-1] // empty
			i++
		case '"':
			end, _, ok := scanString(doc, i)
			if !ok {
				return false
			}
			i = end
		case 't':
			if !bytes.HasPrefix(doc[i:], []byte("true")) {
				return false
			}
			i += 4
		case 'f':
			if !bytes.HasPrefix(doc[i:], []byte("false")) {
				return false
			}
			i += 5
		case 'n':
			if !bytes.HasPrefix(doc[i:], []byte("null")) {
				return false
			}
			i += 4
		default:
			var ok bool
			if i, ok = scanNumber(doc, i); !ok {
				return false
			}
		}
		// After a value: a separator, the end of containers, or the end.
		for {
			i = skipSpace(doc, i)
			if len(stack) == 0 {
				return i == len(doc)
			}
			top := &stack[len(stack)-1]
			switch at(doc, i) {
			case ',':
				i = skipSpace(doc, i+1)
				if top.object {
					var ok bool
					if i, ok = name(i); !ok {
						return false
					}
				}
				continue values
			case '}':
				if !top.object {
					return false
				}
			case ']':
				if top.object {
					return false
				}
			default:
				return false
			}
			stack = stack[:len(stack)-1]
			i++
		}
	}
}

// stringByte classifies the bytes of a string's content: plain (0) bytes
// need no look; a control character (bad), a quote (quote), a backslash
// (escape) or the first byte of a multi-byte sequence (wide) does.
var stringByte = func() (t [256]uint8) {
	for c := range 0x20 {
		t[c] = bad
	}
	t['"'], t['\\'] = quote, escape
	for c := 0x80; c < 0x100; c++ {
		t[c] = wide
	}
	return t
}()

const (
	plain = iota
	bad
	quote
	escape
	wide
)

// scanString checks the string whose quote is b[i]: no control
// characters, valid escapes, UTF-8. It returns the index after its
// closing quote and whether it holds an escape.
func scanString(b []byte, i int) (end int, escaped, ok bool) {
	j := i + 1
	for j < len(b) {
		switch stringByte[b[j]] {
		case plain:
			j++
		case quote:
			return j + 1, escaped, true
		case escape:
			escaped = true
			switch at(b, j+1) {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				j += 2
			case 'u':
				if j+6 > len(b) || !isHex(b[j+2]) || !isHex(b[j+3]) || !isHex(b[j+4]) || !isHex(b[j+5]) {
					return 0, false, false
				}
				j += 6
			default:
				return 0, false, false
			}
		case wide:
			r, size := utf8.DecodeRune(b[j:])
			if r == utf8.RuneError && size == 1 {
				return 0, false, false
			}
			j += size
		default: // a control character
			return 0, false, false
		}
	}
	return 0, false, false // no closing quote
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

// scanNumber checks the number at b[i] (RFC 8259 §6: -?(0|[1-9][0-9]*)
// (.[0-9]+)?([eE][+-]?[0-9]+)?) and returns the index after it. What
// follows it is the caller's to check.
func scanNumber(b []byte, i int) (int, bool) {
	if at(b, i) == '-' {
		i++
	}
	switch c := at(b, i); {
	case c == '0':
		i++
	case '1' <= c && c <= '9':
		i = digits(b, i+1)
	default:
		return 0, false
	}
	if at(b, i) == '.' {
		j := digits(b, i+1)
		if j == i+1 {
			return 0, false
		}
		i = j
	}
	if c := at(b, i); c == 'e' || c == 'E' {
		i++
		if c := at(b, i); c == '+' || c == '-' {
			i++
		}
		j := digits(b, i)
		if j == i {
			return 0, false
		}
		i = j
	}
	return i, true
}

// digits returns the index of the first byte at or after i that is not a
// decimal digit.
func digits(b []byte, i int) int {
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		i++
	}
	return i
}
