package jsonbatch

import (
	"cmp"
	"slices"
)

// removeEach is Remove for a batch whose path has alternatives or a
// reader (see Batch.Remove). Each dropped entry takes with it the
// outermost element around it that holds no kept entry of any
// alternative (a gorush notification whose tokens and "to" are all
// dropped, a token out of "tokens"); an entry that is no element ("to",
// "topic") goes as its member, name and value, when its message keeps
// some entry. The entries a reader made of one value (the topics of one
// condition) go together: that value is one member.
func (b *Batch) removeEach(ds []int) (Removal, error) {
	doc := b.Doc
	gone := make(map[int]bool, len(ds)) // by Start: a reader's entries share it
	for _, i := range ds {
		gone[b.Entries[i].Start] = true
	}
	// kept counts, by the start of each element that holds an entry, the
	// entries in it that stay.
	kept := map[int]int{}
	for _, e := range b.Entries {
		for j := range e.Indices {
			el := b.elems[e.tuple+j]
			if _, ok := kept[el]; !ok {
				kept[el] = 0
			}
			if !gone[e.Start] {
				kept[el]++
			}
		}
	}
	cuts := map[int]map[int]bool{} // container start: the starts of its items to remove
	cut := func(container, item int) {
		if cuts[container] == nil {
			cuts[container] = map[int]bool{}
		}
		cuts[container][item] = true
	}
	for _, e := range b.Entries {
		if !gone[e.Start] {
			continue
		}
		p := b.Path.alt(e.Alt)
		base := skipSpace(doc, 0)
		done := false
		for j := range e.Indices {
			el := b.elems[e.tuple+j]
			if kept[el] == 0 {
				arr, ok := b.arrayAt(p, e, j)
				if !ok {
					return Removal{}, errNotInDocument
				}
				cut(arr, el)
				done = true
				break
			}
			base = el
		}
		if done {
			continue
		}
		// A value that is no element: its member goes (or its element,
		// where the path ends on an index).
		rest := p.segs
		if k := len(e.Indices); k > 0 {
			rest = p.segs[p.wild[k-1]+1:]
		}
		if len(rest) == 0 {
			return Removal{}, errNotInDocument
		}
		container, ok := follow(doc, base, rest[:len(rest)-1])
		if !ok {
			return Removal{}, errNotInDocument
		}
		cut(container, e.Start)
	}

	var spans []span
	for container, items := range cuts {
		s, ok := itemCuts(doc, container, items)
		if !ok {
			return Removal{}, errNotInDocument
		}
		spans = append(spans, s...)
	}
	slices.SortFunc(spans, func(x, y span) int { return cmp.Compare(x.start, y.start) })
	out := Removal{NothingLeft: true}
	for _, e := range b.Entries {
		if !gone[e.Start] {
			out.NothingLeft = false
			break
		}
	}
	for _, i := range ds {
		out.Dropped = append(out.Dropped, b.EntryPath(i))
	}
	body := make([]byte, 0, len(doc))
	at := 0
	for _, c := range spans {
		if c.start < at {
			return Removal{}, errNotInDocument // nested cuts: not expected
		}
		body = append(body, doc[at:c.start]...)
		at = c.end
	}
	out.Body = append(body, doc[at:]...)
	return out, nil
}

// arrayAt returns the start of the array that holds the element at
// entry e's index j, walking p from the document (or the element at
// index j-1).
func (b *Batch) arrayAt(p *Path, e Entry, j int) (int, bool) {
	base, from := skipSpace(b.Doc, 0), 0
	if j > 0 {
		base, from = b.elems[e.tuple+j-1], p.wild[j-1]+1
	}
	to := len(p.segs)
	if j < len(p.wild) {
		to = p.wild[j]
	}
	pos, ok := follow(b.Doc, base, p.segs[from:to])
	return pos, ok && at(b.Doc, pos) == '['
}

// itemCuts returns the spans to cut to remove, from the array or object
// at doc[container], the items (elements, or members by the start of
// their value) whose starts are in items, each with the separator that
// joined it to a neighbour, as remover.level cuts them.
func itemCuts(doc []byte, container int, items map[int]bool) ([]span, bool) {
	var cuts []span
	runStart, runEnd, keptEnd := -1, -1, -1
	found := 0
	j := skipSpace(doc, container+1)
	obj := at(doc, container) == '{'
	for j < len(doc) && doc[j] != ']' && doc[j] != '}' {
		s, v := j, j
		if obj {
			v = skipSpace(doc, skipSpace(doc, skipString(doc, j))+1) // past the ':'
		}
		e := skipValue(doc, v)
		if items[v] {
			found++
			if runStart < 0 {
				runStart = s
			}
			runEnd = e
		} else {
			if runStart >= 0 {
				if keptEnd >= 0 {
					cuts = append(cuts, span{keptEnd, runEnd})
				} else {
					cuts = append(cuts, span{runStart, s})
				}
				runStart = -1
			}
			keptEnd = e
		}
		j = nextItem(doc, e)
	}
	if found != len(items) || j >= len(doc) {
		return nil, false
	}
	switch {
	case runStart < 0:
	case keptEnd >= 0:
		cuts = append(cuts, span{keptEnd, runEnd})
	default:
		cuts = append(cuts, span{container + 1, j}) // every item went
	}
	return cuts, true
}

// Along is an entry that Remove takes away with a dropped one without
// being dropped itself: another topic of the same FCM condition, since a
// reader's value is one member and goes whole.
type Along struct {
	Entry int // its index in Entries
	With  int // the first dropped entry (of drop) whose value it shares
}

// AlongWith returns, in body order, the entries that Remove(drop) takes
// away although drop does not list them. A caller that decided them
// separately gives back what they recorded: they are not sent. Indices
// outside Entries are ignored (Remove refuses them).
func (b *Batch) AlongWith(drop []int) []Along {
	if len(b.Path.alts) == 0 && b.Path.reader == nil {
		return nil // every entry is a value of its own
	}
	with := make(map[int]int, len(drop)) // by Start: a reader's entries share it
	dropped := make(map[int]bool, len(drop))
	for _, i := range drop {
		if i < 0 || i >= len(b.Entries) {
			continue
		}
		dropped[i] = true
		if w, ok := with[b.Entries[i].Start]; !ok || i < w {
			with[b.Entries[i].Start] = i // the first of them
		}
	}
	var out []Along
	for i, e := range b.Entries {
		if w, ok := with[e.Start]; ok && !dropped[i] {
			out = append(out, Along{Entry: i, With: w})
		}
	}
	return out
}
