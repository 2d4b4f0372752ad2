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
//
// With alternatives (see Alternatives), other must follow each of them.
// Other may have no filter, reader or alternatives of its own: it names
// one value per entry.
func (p *Path) CheckDimension(other *Path) error {
	if len(other.alts) > 0 || other.reader != nil || len(other.FilterPaths()) > 0 {
		return fmt.Errorf("%q reads alternatives, a reader or a filtered wildcard, which only the batch dimension %q may: one value per entry is read from each other dimension", other.text, p.text)
	}
	if len(p.alts) > 0 {
		for _, a := range p.alts {
			if err := a.CheckDimension(other); err != nil {
				return err
			}
		}
		return nil
	}
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
	if last >= len(p.segs) || !samePrefix(other.segs[:last+1], p.segs[:last+1]) {
		return fmt.Errorf("%q does not follow the batch dimension %q up to its last wildcard, so its values cannot be matched to the batch's entries",
			other.text, p.text)
	}
	return nil
}

// Resolve returns the value other names for each entry of b, in the order
// of b.Entries: for a path without wildcards the same value for every
// entry; otherwise the value at the entry's indices for other's
// wildcards, Missing when it leads nowhere or to null. Arrays are not
// expanded: an array is one value, rendered as compact JSON. Each value
// is looked up from the element that holds it, which Enumerate noted (no
// walk over the arrays again), and rendered once, however many entries
// share it. It returns CheckDimension's error for a path that cannot be
// resolved per entry.
func (b *Batch) Resolve(other *Path) ([]Value, error) {
	if err := b.Path.CheckDimension(other); err != nil {
		return nil, err
	}
	ents := b.Entries
	if len(ents) == 0 {
		return nil, nil
	}
	k, segs, base := len(other.wild), other.segs, skipSpace(b.Doc, 0)
	if k > 0 {
		segs = segs[other.wild[k-1]+1:] // the rest, from the element at other's last wildcard
	}
	// First the values' spans, then their texts, into a buffer of the
	// spans' size (which holds them but for an object's escapes): most
	// batches have a value per entry, hundreds of them.
	groups := make([]group, 0, len(ents))
	size := 0
	for from := 0; from < len(ents); {
		// The entries that share their first k indices share the value.
		to := from + 1
		for to < len(ents) && slices.Equal(ents[to].Indices[:k], ents[from].Indices[:k]) {
			to++
		}
		pos := base
		if k > 0 {
			pos = b.elems[ents[from].tuple+k-1]
		}
		g := group{from: from}
		if pos, ok := follow(b.Doc, pos, segs); ok {
			g.kind = kindAt(b.Doc, pos)
			if g.kind != Missing {
				g.start, g.end = pos, skipValue(b.Doc, pos)
				size += g.end - g.start
			}
		}
		groups = append(groups, g)
		from = to
	}
	t := texts{ends: make([]int, 0, len(groups))}
	t.buf.Grow(size)
	for _, g := range groups {
		if g.kind == Missing {
			t.missing()
		} else {
			t.add(b.Doc, g.start, g.end, g.kind)
		}
	}
	out := make([]Value, len(ents))
	t.each(func(i int, text string) {
		g, to := groups[i], len(ents)
		if i+1 < len(groups) {
			to = groups[i+1].from
		}
		for j := g.from; j < to; j++ {
			out[j] = Value{Text: text, Kind: g.kind} // a missing value's text is empty
		}
	})
	return out, nil
}

// group is the entries from b.Entries[from] to the next group's first,
// which share one value: of kind, at Doc[start:end].
type group struct {
	from       int
	start, end int
	kind       Kind
}
