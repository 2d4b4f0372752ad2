package jsonbatch

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxSegments bounds a path's length. The walks recurse once per
// wildcard, so this is also their stack bound; no push API nests its
// recipients anywhere near this deep.
const MaxSegments = 64

// Path is a parsed dotted path: object member names, array indices, and
// "*" for every element of an array. The zero Path is not usable; build
// one with ParsePath.
type Path struct {
	text string
	segs []segment
	wild []int // the positions in segs of the wildcards
	// alts are the alternatives of a path made by Alternatives (segs and
	// wild are then alts[0]'s), and group the number of leading
	// wildcards they share.
	alts  []*Path
	group int
	// reader, when set, reads each value the path names as several (see
	// Reader).
	reader *Reader
}

// segment is one step of a path. Like {json.<path>}, a segment applied to
// an object names a member and applied to an array is an index, so "0"
// can name either; index is -1 when the text is no index.
type segment struct {
	name  string
	index int
	wild  bool
	// filter, on a wildcard, keeps the elements whose member it names
	// has (or, negated, has not) one of its values; nil keeps every one.
	filter *filter
}

// sameSeg reports whether a and b name the same step, filters aside: a
// filter picks which elements of an array a path visits, not where they
// are, so "notifications.*.message" follows "notifications.*[platform!=1].topic".
func sameSeg(a, b segment) bool {
	return a.name == b.name && a.index == b.index && a.wild == b.wild
}

// samePrefix reports whether a and b are the same steps, filters aside.
func samePrefix(a, b []segment) bool {
	return slices.EqualFunc(a, b, sameSeg)
}

// ParsePath parses a dotted path such as "notifications.*.tokens.*". It
// refuses an empty path, an empty segment (a leading, trailing or doubled
// dot) and more than MaxSegments segments. A segment that is exactly "*"
// is a wildcard; there is no escape, so a member named "*" or containing
// a dot cannot be named (as with {json.<path>}).
//
// A wildcard may carry a filter, "*[<member>=<value>|<value>...]" or
// "*[<member>!=<value>|...]": it visits only the elements that are
// objects whose member renders (as {json.<path>} renders it, a missing
// or null member as "") as one of the values, or, with "!=", as none of
// them. "notifications.*[platform!=1].topic" reads the topic of every
// notification but iOS ones. A value cannot hold a dot or "|".
func ParsePath(s string) (*Path, error) {
	if s == "" {
		return nil, errors.New("empty path")
	}
	p := &Path{text: s}
	for name := range strings.SplitSeq(s, ".") {
		if name == "" {
			return nil, fmt.Errorf("path %q: empty segment", s)
		}
		if len(p.segs) == MaxSegments {
			return nil, fmt.Errorf("path %q: more than %d segments", s, MaxSegments)
		}
		seg := segment{name: name, index: -1, wild: name == "*"}
		if strings.HasPrefix(name, "*[") {
			f, err := parseFilter(name)
			if err != nil {
				return nil, fmt.Errorf("path %q: %w", s, err)
			}
			seg = segment{name: "*", index: -1, wild: true, filter: f}
		}
		if seg.wild {
			p.wild = append(p.wild, len(p.segs))
		} else if n, err := strconv.Atoi(name); err == nil && n >= 0 {
			seg.index = n // as {json.<path>} reads an index
		}
		p.segs = append(p.segs, seg)
	}
	return p, nil
}

// String returns the path as it was parsed.
func (p *Path) String() string { return p.text }

// Wildcards returns the number of "*" segments in p.
func (p *Path) Wildcards() int { return len(p.wild) }

// concrete renders p with its first len(idx) wildcards replaced by idx,
// then, when idx holds one index more than p has wildcards (an expanded
// array), that index as a last segment. Wildcards beyond idx stay "*".
func (p *Path) concrete(idx []int) string {
	var b strings.Builder
	b.Grow(len(p.text) + 4*len(idx))
	k := 0
	for i, s := range p.segs {
		if i > 0 {
			b.WriteByte('.')
		}
		if s.wild && k < len(idx) {
			b.WriteString(strconv.Itoa(idx[k]))
			k++
			continue
		}
		b.WriteString(s.name)
	}
	if k < len(idx) {
		b.WriteByte('.')
		b.WriteString(strconv.Itoa(idx[k]))
	}
	return b.String()
}
