package jsonbatch

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

// foldedRef is the reference for FoldedName, over the decoded document:
// whether some object along the paths has a member name that
// strings.EqualFold (encoding/json's matching) takes for the segment but
// that is not it. Valid documents name a member once, so a map holds them
// all.
func foldedRef(v any, segs []segment) bool {
	if len(segs) == 0 {
		return false
	}
	s := segs[0]
	switch x := v.(type) {
	case []any:
		for k, e := range x {
			if (s.wild || k == s.index) && foldedRef(e, segs[1:]) {
				return true
			}
		}
	case map[string]any:
		for name, e := range x {
			if name == s.name {
				if foldedRef(e, segs[1:]) {
					return true
				}
			} else if strings.EqualFold(name, s.name) {
				return true
			}
		}
	}
	return false
}

// FuzzFoldedName holds Folds.FoldedName to the reference walk of the
// decoded document, for one path and for two walked together: a body the
// gateway lets through has, along every path it reads, no member that
// encoding/json would read in place of the one counted. Documents Valid
// refuses are not asked.
func FuzzFoldedName(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s.doc), s.path, s.other)
	}
	f.Add([]byte(`{"notifications":[{"tokens":["decoy"],"Tokens":["victim"]}]}`), "notifications.*.tokens.*", "notifications.*.message")
	f.Add([]byte(`{"to":"a","tO":"b","priorit\u017f":1}`), "to", "priority")
	f.Add([]byte(`[{"to":"a","data":{"To":1}},{"\u212a":2}]`), "*.to", "*.k")
	f.Fuzz(func(t *testing.T, doc []byte, path, other string) {
		p, err := ParsePath(path)
		if err != nil || Valid(doc) != nil {
			return
		}
		// Numbers as written: a valid number may be out of float64's
		// range (1e400), which Unmarshal refuses.
		var v any
		dec := json.NewDecoder(bytes.NewReader(doc))
		dec.UseNumber()
		if err := dec.Decode(&v); err != nil {
			t.Fatalf("Valid took %q, which encoding/json refuses: %v", doc, err)
		}
		name, seg, got := NewFolds([]*Path{p}).FoldedName(doc)
		if want := foldedRef(v, p.segs); got != want {
			t.Fatalf("%s in %s: found %v (%q for %q); the reference says %v", path, doc, got, name, seg, want)
		}
		if got && !strings.EqualFold(name, seg) {
			t.Fatalf("%s in %s: %q reported for %q, which it does not fold to", path, doc, name, seg)
		}
		q, err := ParsePath(other)
		if err != nil || hasFilter(other) {
			return
		}
		_, _, both := NewFolds([]*Path{p, q}).FoldedName(doc)
		if want := foldedRef(v, p.segs) || foldedRef(v, q.segs); both != want {
			t.Fatalf("%s and %s in %s: found %v; the reference says %v", path, other, doc, both, want)
		}
	})
}
