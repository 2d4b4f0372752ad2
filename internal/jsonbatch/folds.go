package jsonbatch

import "strings"

// FoldedName returns a member name of doc, a document that passed Valid,
// that Go's encoding/json would take for a segment of p although it is
// not that segment ("Tokens" or "TOKENS" for "tokens"; "ſ" folds to "s"
// and the Kelvin sign to "k"), with the segment it shadows; ok is false
// when there is none. encoding/json (gorush, and many upstreams) matches
// member names without regard to case, Unicode simple folding included,
// and the last match wins, so such a member beside the one the gateway
// reads, or instead of it, would send to a recipient other than the one
// counted. It walks every object along p: all elements at a wildcard,
// each member's value where a segment names it.
func (p *Path) FoldedName(doc []byte) (name, seg string, ok bool) {
	return foldedAt(doc, skipSpace(doc, 0), p.segs)
}

func foldedAt(doc []byte, pos int, segs []segment) (string, string, bool) {
	if len(segs) == 0 {
		return "", "", false
	}
	s := segs[0]
	switch at(doc, pos) {
	case '[':
		if !s.wild && s.index < 0 {
			return "", "", false
		}
		it := iterate(doc, pos)
		for {
			k, start, _, more := it.next()
			if !more {
				return "", "", false
			}
			if s.wild || k == s.index {
				if name, seg, ok := foldedAt(doc, start, segs[1:]); ok {
					return name, seg, true
				}
			}
		}
	case '{':
		j := skipSpace(doc, pos+1)
		for at(doc, j) == '"' {
			end := skipString(doc, j)
			key := string(doc[j+1 : end-1])
			if strings.IndexByte(key, '\\') >= 0 {
				key = unquote(doc[j:end])
			}
			j = skipSpace(doc, skipSpace(doc, end)+1) // past the ':'
			switch {
			case key == s.name:
				if name, seg, ok := foldedAt(doc, j, segs[1:]); ok {
					return name, seg, true
				}
			case strings.EqualFold(key, s.name):
				return key, s.name, true
			}
			j = skipSpace(doc, skipValue(doc, j))
			if at(doc, j) != ',' {
				break
			}
			j = skipSpace(doc, j+1)
		}
	}
	return "", "", false
}
