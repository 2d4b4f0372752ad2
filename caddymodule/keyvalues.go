package caddymodule

import (
	"fmt"
	"net/http"
	"strings"
	"unicode"

	"github.com/freqcap/caddy-freqcap/caddymodule/internal/reply"
	"github.com/freqcap/caddy-freqcap/internal/jsonbatch"
)

// A dimension that keys records (the first dimension of a rule: the
// recipient, a campaign) is held to one value per recipient, whatever its
// spelling: upstreams read " dave", "dave\u200b" and "dave" as one
// address, 42.0 and 4.2e1 as the number 42, and deliver ["dave"] to dave,
// where the text would count each as a recipient of its own, with a cap
// of its own. So its value is trimmed of white space and invisible marks
// (empty after that: missing), and a JSON value read for it must be a
// string, an integer in digits, or a bool; anything else is a 400.

// keyingDims marks, by index of Handler.dims, the dimensions some rule
// keys its records by (its first).
func (h *Handler) keyingDims() []bool {
	keying := make([]bool, len(h.dims))
	for _, cr := range h.rules {
		if len(cr.dims) > 0 {
			keying[cr.dims[0]] = true
		}
	}
	return keying
}

// trimKey trims a keying value of what no address carries at its ends:
// white space (Unicode's) and the zero-width space, joiners and BOM.
func trimKey(s string) string {
	return strings.TrimFunc(s, func(r rune) bool {
		return unicode.IsSpace(r) || r == '\u200b' || r == '\u200c' || r == '\u200d' || r == '\u2060' || r == '\ufeff'
	})
}

// keyKind refuses a JSON value that cannot key records as the upstream
// reads it: an object or an array (["dave"] is delivered to dave), and a
// number not written as an integer in digits (42.0, 4.2e1, -0 and 042
// are 42, 0 and 42 to most readers). where names the value for the
// reason ("to", "3.to").
func keyKind(name, where string, v jsonbatch.Value) *reply.Failure {
	switch v.Kind {
	case jsonbatch.Object, jsonbatch.Array:
		return &reply.Failure{Status: http.StatusBadRequest, Dimension: name,
			Reason: fmt.Sprintf("dimension %s at %s is an %s; it keys the counts, so it takes one value (a string or an integer); several recipients are a batch path such as {json.to.*}", name, where, v.Kind)}
	case jsonbatch.Number:
		if !digitsInteger(v.Text) {
			return &reply.Failure{Status: http.StatusBadRequest, Dimension: name,
				Reason: fmt.Sprintf("dimension %s at %s is the number %s; it keys the counts, so write it as an integer in digits (readers take 42.0 and 4.2e1 for 42)", name, where, v.Text)}
		}
	}
	return nil
}

// digitsInteger reports whether s is an integer as JSON writes it
// plainly: an optional minus, then 0 or digits not starting with 0; not
// "-0".
func digitsInteger(s string) bool {
	digits := strings.TrimPrefix(s, "-")
	if digits == "" || (len(digits) > 1 && digits[0] == '0') || s == "-0" {
		return false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// singleJSONPath returns the path of expr when it is exactly one
// {json.<path>} placeholder without wildcards, else "".
func singleJSONPath(expr string) string {
	path, ok := strings.CutPrefix(strings.TrimSpace(expr), "{json.")
	if !ok || !strings.HasSuffix(path, "}") {
		return ""
	}
	path = path[:len(path)-1]
	if strings.ContainsAny(path, "{}") || hasWildcard(path) {
		return ""
	}
	return path
}

// keyShapes checks, in a single send's JSON body, the value of each
// keying dimension that is one {json.<path>} (see keyKind).
func (h *Handler) keyShapes(doc []byte) *reply.Failure {
	for i, path := range h.keyPaths {
		if path == "" {
			continue
		}
		if f := keyKind(h.dims[i].Name, path, jsonbatch.Lookup(doc, path)); f != nil {
			return f
		}
	}
	return nil
}

// keyEntries holds a batch's values of a keying dimension to the same as
// a single send's: each entry's value (from the entries themselves, or
// resolved per entry) checked by keyKind and trimmed in place, the one
// value for all trimmed.
func keyEntries(b *jsonbatch.Batch, name string, t *entryText) *reply.Failure {
	switch {
	case t.ents != nil:
		for i := range t.ents {
			if f := keyKind(name, b.EntryPath(i), t.ents[i].Value); f != nil {
				return f
			}
			t.ents[i].Text = trimKey(t.ents[i].Text)
		}
	case t.each != nil:
		for i := range t.each {
			if f := keyKind(name, b.EntryPath(i), t.each[i]); f != nil {
				return f
			}
			t.each[i].Text = trimKey(t.each[i].Text)
		}
	default:
		t.all = trimKey(t.all)
	}
	return nil
}
