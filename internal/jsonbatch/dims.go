package jsonbatch

import (
	"fmt"
	"slices"
)

// CheckDimension says whether other can be resolved for each entry of a
// batch named by p (other dimensions per entry), for use at
// config time. A path without wildcards always can: it has one value for
// the whole batch. A path with wildcards can when it follows p segment for
// segment up to its own last wildcard, so that each entry's indices name
// one value of it: "notifications.*.message" for
// "notifications.*.tokens.*", "*.title" for "*.to". Anything else would
// need an entry to take several values, or values from another array,
// and is an error saying which.
func (p *Path) CheckDimension(other *Path) error {
	k := len(other.wild)
	if k == 0 {
		return nil
	}
	if k > len(p.wild) {
		return fmt.Errorf("%q has %d wildcards, more than the %d of the batch dimension %q",
			other.text, k, len(p.wild), p.text)
	}
	last := other.wild[k-1]
	// other's last wildcard may lie past p's end ("a.b.*" beside "*"):
	// then it cannot follow p up to it.
	if last >= len(p.segs) || !slices.Equal(other.segs[:last+1], p.segs[:last+1]) {
		return fmt.Errorf("%q does not follow the batch dimension %q up to its last wildcard, so its values cannot be matched to the batch's entries",
			other.text, p.text)
	}
	return nil
}

// Resolve returns the value other names for each entry of b, in the order
// of b.Entries: for a path without wildcards the same value for every
// entry; otherwise the value at the entry's indices for other's
// wildcards, Missing when it leads nowhere or to null. Arrays are not
// expanded: an array is one value, rendered as compact JSON. The walk
// visits only the elements that hold entries and renders each value
// once, however many entries share it. It returns CheckDimension's error
// for a path that cannot be resolved per entry.
func (b *Batch) Resolve(other *Path) ([]Value, error) {
	if err := b.Path.CheckDimension(other); err != nil {
		return nil, err
	}
	if len(b.Entries) == 0 {
		return nil, nil
	}
	r := resolver{b: b, other: other, k: len(other.wild), out: make([]Value, len(b.Entries))}
	r.level(skipSpace(b.Doc, 0), 0, 0, len(b.Entries))
	all := string(r.t.buf)
	from := 0
	for i, g := range r.groups {
		v := Value{Kind: g.kind}
		if g.kind != Missing {
			v.Text = all[from:r.t.ends[i]]
		}
		from = r.t.ends[i]
		for j := g.from; j < g.to; j++ {
			r.out[j] = v
		}
	}
	return r.out, nil
}

// resolver walks a batch's wildcard levels down to other's last wildcard.
type resolver struct {
	b      *Batch
	other  *Path
	k      int // other's wildcards
	t      texts
	groups []group
	out    []Value
}

// group is the entries b.Entries[from:to], which share one value.
type group struct {
	from, to int
	kind     Kind
}

// level handles the entries [from, to), which share their first L
// indices; base is the element those indices name (the document for
// L = 0).
func (r *resolver) level(base, L, from, to int) {
	doc, segs := r.b.Doc, r.b.Path.segs
	start := 0
	if L > 0 {
		start = r.b.Path.wild[L-1] + 1
	}
	if L == r.k {
		pos, ok := follow(doc, base, r.other.segs[start:])
		g := group{from: from, to: to}
		if ok {
			g.kind = kindAt(doc, pos)
		}
		if g.kind == Missing {
			r.t.ends = append(r.t.ends, len(r.t.buf))
		} else {
			r.t.add(doc, pos, skipValue(doc, pos), g.kind)
		}
		r.groups = append(r.groups, g)
		return
	}
	arr, ok := follow(doc, base, segs[start:r.b.Path.wild[L]])
	if !ok || at(doc, arr) != '[' {
		return // not reached: Enumerate found entries here
	}
	ents := r.b.Entries
	for it := iterate(doc, arr); from < to; {
		k, elem, _, ok := it.next()
		if !ok {
			return
		}
		if ents[from].Indices[L] != k {
			continue
		}
		end := from + 1
		for end < to && ents[end].Indices[L] == k {
			end++
		}
		r.level(elem, L+1, from, end)
		from = end
	}
}
