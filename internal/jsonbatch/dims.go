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
	// Most batches have a value per entry: room for that at once.
	t := texts{ends: make([]int, 0, len(ents))}
	groups := make([]group, 0, len(ents))
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
		g := group{from: from, to: to}
		pos, ok := follow(b.Doc, pos, segs)
		if ok {
			g.kind = kindAt(b.Doc, pos)
		}
		if g.kind == Missing {
			t.missing()
		} else {
			t.add(b.Doc, pos, skipValue(b.Doc, pos), g.kind)
		}
		groups = append(groups, g)
		from = to
	}
	out := make([]Value, len(ents))
	t.each(func(i int, text string) {
		g := groups[i]
		for j := g.from; j < g.to; j++ {
			out[j] = Value{Text: text, Kind: g.kind} // a missing value's text is empty
		}
	})
	return out, nil
}

// group is the entries b.Entries[from:to], which share one value.
type group struct {
	from, to int
	kind     Kind
}
