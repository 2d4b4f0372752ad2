package caddymodule

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/freqcap/caddy-freqcap/internal/jsonbatch"
)

// A JSON body is validated once and then read in place: each {json.<path>}
// walks the bytes to its value. Nothing is decoded that no placeholder
// asks for, so a request costs a validation pass and a short walk per
// dimension rather than a map per object (which made body parsing the
// largest part of the handler's time).

// parseJSON checks that raw is exactly one JSON value and returns it for
// lookupJSON. It refuses bodies on whose values two readers could
// disagree: bytes that are not UTF-8 and an object that names a member
// twice. The rules are jsonbatch.Valid's, so that a body the placeholders
// read is one the batch path reads the same way.
func parseJSON(raw []byte) ([]byte, error) {
	if err := jsonbatch.Valid(raw); err != nil {
		return nil, err
	}
	return bytes.Trim(raw, " \t\r\n"), nil // JSON's whitespace, no more
}

// lookupJSON follows a dotted path (object keys and array indices) through
// doc, a value parseJSON accepted, and renders the value found: a string
// as its text, a number exactly as sent, true/false, and an object or
// array as compact JSON with its members sorted. null and a path that leads nowhere are not found.
func lookupJSON(doc []byte, path string) (any, bool) {
	if path == "" || len(doc) == 0 {
		return nil, false
	}
	v := doc
	for seg := range strings.SplitSeq(path, ".") {
		var ok bool
		switch v[0] {
		case '{':
			v, ok = member(v, seg)
		case '[':
			v, ok = element(v, seg)
		}
		if !ok {
			return nil, false
		}
	}
	switch v[0] {
	case 'n':
		return nil, false
	case '"':
		return jsonString(v), true
	case '{', '[':
		// Canonical text (members sorted, numbers as sent), so that one
		// object sent with its members in another order is one value.
		dec := json.NewDecoder(bytes.NewReader(v))
		dec.UseNumber()
		var x any
		if dec.Decode(&x) != nil {
			return nil, false
		}
		out, err := json.Marshal(x)
		if err != nil {
			return nil, false
		}
		return string(out), true
	}
	return string(v), true // a number as sent, true or false
}

// member returns the value of obj's member name.
func member(obj []byte, name string) ([]byte, bool) {
	i := skipSpace(obj, 1)
	for i < len(obj) && obj[i] == '"' {
		end := skipString(obj, i)
		key := obj[i:end]
		i = skipSpace(obj, end)
		i = skipSpace(obj, i+1) // the ':'
		vend := skipValue(obj, i)
		if keyIs(key, name) {
			return obj[i:vend], true
		}
		i = skipSpace(obj, vend)
		if obj[i] != ',' {
			break
		}
		i = skipSpace(obj, i+1)
	}
	return nil, false
}

// element returns arr's element at the index seg.
func element(arr []byte, seg string) ([]byte, bool) {
	n, err := strconv.Atoi(seg)
	if err != nil || n < 0 {
		return nil, false
	}
	i := skipSpace(arr, 1)
	if arr[i] == ']' {
		return nil, false
	}
	for k := 0; ; k++ {
		end := skipValue(arr, i)
		if k == n {
			return arr[i:end], true
		}
		i = skipSpace(arr, end)
		if arr[i] != ',' {
			return nil, false
		}
		i = skipSpace(arr, i+1)
	}
}

// keyIs reports whether the quoted name key is name ("a" and "\u0061"
// are one name).
func keyIs(key []byte, name string) bool {
	if bytes.IndexByte(key, '\\') < 0 {
		return string(key[1:len(key)-1]) == name
	}
	return jsonString(key) == name
}

// jsonString is the text of the quoted string s.
func jsonString(s []byte) string {
	if bytes.IndexByte(s, '\\') < 0 {
		return string(s[1 : len(s)-1])
	}
	var out string
	_ = json.Unmarshal(s, &out) // valid: parseJSON checked it
	return out
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string starting at b[i].
func skipString(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return len(b)
}

// skipValue returns the index after the value starting at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = skipString(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	}
	j := i
	for j < len(b) && !strings.ContainsRune(",}] \t\r\n", rune(b[j])) {
		j++
	}
	return j
}
