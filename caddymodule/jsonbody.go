package caddymodule

import (
	"bytes"
	"errors"

	"github.com/freqcap/caddy-freqcap/internal/jsonbatch"
)

// utf8BOM is a byte order mark, which JSON forbids a sender to add (RFC
// 8259 §8.1): Go's reader and Node's JSON.parse refuse a body that starts
// with one, where some readers skip it.
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

var errBOM = errors.New("it starts with a byte order mark (EF BB BF), which JSON forbids a sender to add (RFC 8259, 8.1); send it without")

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
	if bytes.HasPrefix(raw, utf8BOM) {
		return nil, errBOM
	}
	if err := jsonbatch.Valid(raw); err != nil {
		return nil, err
	}
	// Kept whole, white space around the value too: a batch under drop
	// is rewritten from these bytes, and every byte but the dropped
	// entries' goes on as sent (a trailing newline was lost).
	return raw, nil
}

// lookupJSON follows a dotted path (object keys and array indices) through
// doc, a value parseJSON accepted, and renders the value found as
// jsonbatch.Lookup does: a string as its text, a number exactly as sent,
// true/false, and an object or array as compact JSON with its members
// sorted. null and a path that leads nowhere are not found.
func lookupJSON(doc []byte, path string) (any, bool) {
	v := jsonbatch.Lookup(doc, path)
	if v.Kind == jsonbatch.Missing {
		return nil, false
	}
	return v.Text, true
}
