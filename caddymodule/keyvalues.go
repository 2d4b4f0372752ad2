package caddymodule

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"

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

// trimKey trims a keying value (jsonbatch.TrimKey).
func trimKey(s string) string { return jsonbatch.TrimKey(s) }

// unframed returns dimension di's value v as read (trimmed when it keys
// records), or "" when v is only the text around the expression's
// placeholders: "user:" of "user:{json.to}" read nothing, and would
// otherwise count every such request under one key.
func (h *Handler) unframed(di int, v string) string {
	if h.keying[di] {
		v = trimKey(v)
	}
	if f := h.frames[di]; f != "" && v == f {
		return ""
	}
	return v
}

// frameOf is the text of expr around its placeholders (what Caddy's
// replacer leaves of it with every placeholder empty), trimmed as a
// keying value is when keying is set; "" for an expression without
// placeholders (a constant is no frame) or without text.
func frameOf(expr string, keying bool) string {
	frame := caddy.NewEmptyReplacer().ReplaceAll(expr, "")
	switch {
	case frame == expr:
		return ""
	case keying:
		return trimKey(frame)
	}
	return frame
}

// keyKind refuses a JSON value that cannot key records as the upstream
// reads it: an object or an array (["dave"] is delivered to dave), and a
// number not written as an integer in digits (42.0, 4.2e1, -0 and 042
// are 42, 0 and 42 to most readers), or past 2^53 (rounded by many).
// where names the value for the reason ("to", "3.to").
func keyKind(name, where string, v jsonbatch.Value) *reply.Failure {
	switch v.Kind {
	case jsonbatch.Object, jsonbatch.Array:
		return &reply.Failure{Status: http.StatusBadRequest, Dimension: name,
			Reason: fmt.Sprintf("dimension %s at %s is an %s; it keys the counts, so it takes one value (a string or an integer); several recipients are a batch path such as {json.to.*}", name, where, v.Kind)}
	case jsonbatch.String:
		return withNUL(name, where, trimKey(v.Text)) // a NUL at an end is trimmed
	case jsonbatch.Number:
		if !digitsInteger(v.Text) {
			return &reply.Failure{Status: http.StatusBadRequest, Dimension: name,
				Reason: fmt.Sprintf("dimension %s at %s is the number %s; it keys the counts, so write it as an integer in digits from -(2^53-1) to 2^53-1 (readers take 42.0 and 4.2e1 for 42, and round larger ones), or as a string", name, where, v.Text)}
		}
	}
	return nil
}

// withNUL refuses a keying value with a NUL in it: an upstream written in
// C, or one that hands the value to one, ends it there, so "ann\x00x1"
// and "ann\x00x2" would be two recipients here and ann to it.
func withNUL(name, where, v string) *reply.Failure {
	if strings.IndexByte(v, 0) < 0 {
		return nil
	}
	at := ""
	if where != "" {
		at = " at " + where
	}
	return &reply.Failure{Status: http.StatusBadRequest, Dimension: name,
		Reason: fmt.Sprintf("dimension %s%s has a NUL in it, where many upstreams end a value; it keys the counts", name, at)}
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
	// Past 2^53 many readers (JavaScript, Go's any) round it: two ids
	// would be one upstream and two here. Such an id is a string.
	n, err := strconv.ParseInt(s, 10, 64)
	return err == nil && n >= -maxExactInt && n <= maxExactInt
}

// maxExactInt is the largest integer every JSON reader holds exactly
// (2^53 - 1: a float64's).
const maxExactInt = 1<<53 - 1

// keyJSONPaths returns the {json.<path>} placeholders of expr that have
// no wildcard: each value a keying dimension reads from a single send's
// body, alone or within text ("user:{json.to}").
func keyJSONPaths(expr string) []string {
	var out []string
	for _, path := range placeholderArgs(expr, "json") {
		if !hasWildcard(path) {
			out = append(out, path)
		}
	}
	return out
}

// keyShapes checks, in a JSON body, each value a keying dimension reads
// without a wildcard (see keyKind).
func (h *Handler) keyShapes(doc []byte) *reply.Failure {
	for i, paths := range h.keyPaths {
		for _, path := range paths {
			if f := keyKind(h.dims[i].Name, path, jsonbatch.Lookup(doc, path)); f != nil {
				return f
			}
		}
	}
	return nil
}

// keyEntries holds a batch's values of a keying dimension to the same as
// a single send's: each entry's value checked by keyKind and trimmed, and
// the one value for all trimmed. The batch's own entries are not
// changed (answers name a recipient as the sender wrote it): trimmed
// values go into a copy, made only when some value changes.
func keyEntries(b *jsonbatch.Batch, name string, t *entryText) *reply.Failure {
	switch {
	case t.ents != nil:
		var each []jsonbatch.Value
		for i := range t.ents {
			v := t.ents[i].Value
			if f := keyKind(name, b.EntryPath(i), v); f != nil {
				return f
			}
			if trimmed := trimKey(v.Text); trimmed != v.Text && each == nil {
				each = make([]jsonbatch.Value, len(t.ents))
				for j := range i {
					each[j] = t.ents[j].Value
				}
			}
			if each != nil {
				each[i] = jsonbatch.Value{Text: trimKey(v.Text), Kind: v.Kind}
			}
		}
		if each != nil {
			t.each, t.ents = each, nil
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
		return withNUL(name, "", t.all)
	}
	return nil
}
