package jsonbatch

import (
	"bytes"
	"strconv"
	"strings"
)

// Lookup returns the value that path, a dotted path of member names and
// array indices with no wildcard ("*" is a member name here), names in
// doc, a document that passed Valid and is trimmed of whitespace: what
// {json.<path>} reads in a single send. It renders the value as Value
// says; a path that leads nowhere or to null is Missing. It walks the
// bytes in place, splitting path as it goes, and allocates only the
// text returned.
func Lookup(doc []byte, path string) Value {
	if path == "" {
		return Value{}
	}
	pos := skipSpace(doc, 0)
	for seg := range strings.SplitSeq(path, ".") {
		ok := false
		switch at(doc, pos) {
		case '{':
			pos, ok = member(doc, pos, seg)
		case '[':
			if n, err := strconv.Atoi(seg); err == nil && n >= 0 {
				pos, ok = element(doc, pos, n)
			}
		}
		if !ok {
			return Value{}
		}
	}
	k := kindAt(doc, pos)
	if k == Missing {
		return Value{}
	}
	end := skipValue(doc, pos)
	if v := doc[pos:end]; k == Number || k == Bool || (k == String && bytes.IndexByte(v, '\\') < 0) {
		if k == String {
			v = v[1 : len(v)-1]
		}
		return Value{Text: string(v), Kind: k} // the bytes as sent: one allocation
	}
	return Value{Text: string(appendRendered(nil, doc, pos, end, k)), Kind: k}
}
