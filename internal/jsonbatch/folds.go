package jsonbatch

import (
	"bytes"
	"unicode/utf8"
)

// Folds is a set of paths whose member names a body must not shadow:
// FoldedName walks them all in one pass over the bytes they reach.
type Folds struct{ root foldNode }

// foldNode is one segment of the paths, and the segments that follow it.
type foldNode struct {
	seg  segment
	kids []*foldNode
}

// NewFolds returns the set of paths; a nil set holds none.
func NewFolds(paths []*Path) *Folds {
	f := &Folds{}
	for _, p := range paths {
		n := &f.root
		for _, s := range p.segs {
			s.filter = nil // a filter picks elements: their names are read all the same
			var next *foldNode
			for _, k := range n.kids {
				if k.seg == s {
					next = k
					break
				}
			}
			if next == nil {
				next = &foldNode{seg: s}
				n.kids = append(n.kids, next)
			}
			n = next
		}
	}
	return f
}

// FoldedName returns a member name of doc, a document that passed Valid,
// that Go's encoding/json would take for a segment of one of the paths
// although it is not that segment ("Tokens" or "TOKENS" for "tokens"; "ſ"
// folds to "s" and the Kelvin sign to "k"), with the segment it shadows;
// ok is false when there is none. encoding/json (gorush, and many
// upstreams) matches member names without regard to case, Unicode simple
// folding included, and the last match wins, so such a member beside the
// one the gateway reads, or instead of it, would send to a recipient
// other than the one counted. It walks every object along the paths, in
// one pass over the bytes it reaches: all elements at a wildcard, each
// member's value where a segment names it.
func (f *Folds) FoldedName(doc []byte) (name, seg string, ok bool) {
	if f == nil {
		return "", "", false
	}
	w := foldWalk{doc: doc}
	w.walk(skipSpace(doc, 0), &f.root)
	return w.name, w.seg, w.found
}

// foldWalk is one FoldedName walk: the document and what it found.
type foldWalk struct {
	doc       []byte
	name, seg string
	found     bool
}

// walk checks the value at pos against the segments after n and returns
// where the value ends. Containers it walks into are scanned once: their
// end is where the walk left them, not a second skip over their bytes.
func (w *foldWalk) walk(pos int, n *foldNode) int {
	doc := w.doc
	if len(n.kids) == 0 || w.found {
		return skipValue(doc, pos)
	}
	switch at(doc, pos) {
	case '[':
		j := skipSpace(doc, pos+1)
		for k := 0; j < len(doc) && doc[j] != ']'; k++ {
			end := -1
			for _, kid := range n.kids {
				if kid.seg.wild || kid.seg.index == k {
					end = w.walk(j, kid) // another kid for the same element walks it again: rare
				}
			}
			if end < 0 {
				end = skipValue(doc, j)
			}
			if w.found {
				return end
			}
			j = nextItem(doc, end)
		}
		return j + 1
	case '{':
		j := skipSpace(doc, pos+1)
		for at(doc, j) == '"' {
			end := skipString(doc, j)
			key := doc[j+1 : end-1]
			if bytes.IndexByte(key, '\\') >= 0 {
				key = []byte(unquote(doc[j:end])) // "a" and "\u0061" are one name
			}
			j = skipSpace(doc, skipSpace(doc, end)+1) // past the ':'
			var next *foldNode
			for _, kid := range n.kids {
				switch {
				case string(key) == kid.seg.name:
					next = kid
				case foldsTo(key, kid.seg.name):
					w.name, w.seg, w.found = string(key), kid.seg.name, true
					return j
				}
			}
			if next != nil {
				j = w.walk(j, next)
			} else {
				j = skipValue(doc, j)
			}
			if w.found {
				return j
			}
			j = nextItem(doc, j)
		}
		return j + 1
	}
	return skipValue(doc, pos)
}

// nextItem returns where the container item after the one ending at j
// starts, past the comma; or the closing bracket when it was the last.
func nextItem(doc []byte, j int) int {
	j = skipSpace(doc, j)
	if at(doc, j) == ',' {
		j = skipSpace(doc, j+1)
	}
	return j
}

// foldsTo reports whether key equals name under Unicode simple folding, as
// bytes.EqualFold (and so encoding/json) compares them, without
// allocating. Two ASCII texts fold together only at one length, which
// rules most keys out at once.
func foldsTo(key []byte, name string) bool {
	if len(key) != len(name) && isASCII(key) && isASCII([]byte(name)) {
		return false
	}
	var buf [64]byte
	if len(name) > len(buf) {
		return bytes.EqualFold(key, []byte(name))
	}
	return bytes.EqualFold(key, append(buf[:0], name...))
}

func isASCII(b []byte) bool {
	for _, c := range b {
		if c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}
