package jsonbatch

import (
	"fmt"
	"slices"
	"strings"
)

// filter is a wildcard's "[<member>=<value>|...]" or
// "[<member>!=<value>|...]" (see ParsePath).
type filter struct {
	member string
	values []string
	negate bool
}

// parseFilter parses a wildcard segment with a filter, "*[...]".
func parseFilter(seg string) (*filter, error) {
	body, ok := strings.CutSuffix(strings.TrimPrefix(seg, "*["), "]")
	if !ok {
		return nil, fmt.Errorf("wildcard filter %q: no closing ]", seg)
	}
	f := &filter{}
	name, values, found := strings.Cut(body, "!=")
	if found {
		f.negate = true
	} else if name, values, found = strings.Cut(body, "="); !found {
		return nil, fmt.Errorf("wildcard filter %q: needs <member>=<value> or <member>!=<value>", seg)
	}
	if name == "" || strings.ContainsAny(name, "[]=!|*") {
		return nil, fmt.Errorf("wildcard filter %q: bad member name %q", seg, name)
	}
	f.member = name
	for v := range strings.SplitSeq(values, "|") {
		if v == "" || strings.ContainsAny(v, "[]=") {
			return nil, fmt.Errorf("wildcard filter %q: bad value %q", seg, v)
		}
		f.values = append(f.values, v)
	}
	return f, nil
}

// admits reports whether the element at doc[pos] passes f: its member
// renders as one of f's values (none of them, negated). An element that
// is no object has no member: it renders as "".
func (f *filter) admits(doc []byte, pos int) bool {
	text := ""
	if at(doc, pos) == '{' {
		if v, ok := member(doc, pos, f.member); ok {
			if k := kindAt(doc, v); k != Missing {
				text = string(appendRendered(nil, doc, v, skipValue(doc, v), k))
			}
		}
	}
	return slices.Contains(f.values, text) != f.negate
}

// FilterPaths returns, for each filtered wildcard of p (or of its
// alternatives), the path of the member the filter reads
// ("notifications.*.platform" for "notifications.*[platform!=1].topic"),
// so that the handler refuses a body that shadows it as it refuses one
// that shadows a path it reads.
func (p *Path) FilterPaths() []*Path {
	var out []*Path
	for _, q := range p.each() {
		for i, s := range q.segs {
			if s.filter == nil {
				continue
			}
			segs := append(slices.Clone(q.segs[:i+1]), segment{name: s.filter.member, index: -1})
			for j := range segs {
				segs[j].filter = nil
			}
			names := make([]string, len(segs))
			for j, sg := range segs {
				names[j] = sg.name
			}
			out = append(out, &Path{text: strings.Join(names, "."), segs: segs, wild: q.wild[:slices.Index(q.wild, i)+1]})
		}
	}
	return out
}

// each returns p's alternatives, or p alone.
func (p *Path) each() []*Path {
	if len(p.alts) > 0 {
		return p.alts
	}
	return []*Path{p}
}

// alt returns p's alternative i, or p for a path without alternatives.
func (p *Path) alt(i int) *Path {
	if len(p.alts) > 0 {
		return p.alts[i]
	}
	return p
}
