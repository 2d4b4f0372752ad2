package jsonbatch

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
)

// Removal is the result of Batch.Remove.
type Removal struct {
	// Body is the document without the dropped entries' elements.
	Body []byte
	// Dropped holds the concrete paths of the dropped entries, in body
	// order (for the Frequency-Cap-Dropped header; see SFStringList).
	Dropped []string
	// NothingLeft reports that every entry was dropped: Body names no
	// recipient, and the handler answers 429 instead of sending it.
	NothingLeft bool
}

// Remove returns b's document without the entries whose positions in
// b.Entries are listed in drop (in any order; repeats count once).
//
// What goes is the array element at the entry's last index (Entry.Indices):
// a token out of "tokens", an element out of Expo's "to" array, and, when
// "to" is a string, the message that holds it. When that leaves empty an
// array that one of the path's wildcards walks, or the array the path
// ended on, the element holding that array at the wildcard before goes
// too, and so on up: an Expo message whose only recipient is dropped
// disappears, and so does a gorush notification whose tokens all are. The
// outermost array may become "[]". An array that was empty, or keeps an
// element that is no entry (a null), stays.
//
// Each removed element takes with it the separator that joined it to a
// neighbour: the comma and the whitespace between them (the one before it
// when a kept element precedes it, else the one after). An array emptied
// at the outermost level loses the whitespace inside its brackets. Every
// other byte is kept as written, so the result is valid JSON with the
// sender's key order, spacing, escapes and numbers.
//
// An entry without indices (a path without wildcards naming one value)
// has no element to remove: dropping it leaves Body unchanged and, as it
// is the batch's only entry, sets NothingLeft.
//
// A path with alternatives or a reader removes as removeEach says: a
// dropped entry that is no element goes as its member ("to" out of a
// gorush notification), and an element goes once no alternative keeps
// an entry in it.
func (b *Batch) Remove(drop []int) (Removal, error) {
	out, err := b.remove(drop)
	if err == nil {
		b.unwrap(&out)
	}
	return out, err
}

func (b *Batch) remove(drop []int) (Removal, error) {
	ds := slices.Clone(drop)
	slices.Sort(ds) // body order: Entries are in body order
	ds = slices.Compact(ds)
	for _, i := range ds {
		if i < 0 || i >= len(b.Entries) {
			return Removal{}, fmt.Errorf("removing entry %d of %d: no such entry", i, len(b.Entries))
		}
	}
	if (len(b.Path.alts) > 0 || b.Path.reader != nil) && len(ds) > 0 {
		return b.removeEach(ds)
	}
	out := Removal{Body: b.Doc, NothingLeft: len(ds) == len(b.Entries) && len(ds) > 0}
	for _, i := range ds {
		out.Dropped = append(out.Dropped, b.EntryPath(i))
	}
	if len(ds) == 0 || len(b.Entries[ds[0]].Indices) == 0 {
		return out, nil
	}
	r := remover{b: b, ds: ds}
	r.level(skipSpace(b.Doc, 0), 0, 0, len(ds))
	if r.err != nil {
		return Removal{}, r.err
	}
	slices.SortFunc(r.cuts, func(x, y span) int { return cmp.Compare(x.start, y.start) })
	size := len(b.Doc)
	for _, c := range r.cuts {
		size -= c.end - c.start
	}
	body := make([]byte, 0, size)
	at := 0
	for _, c := range r.cuts {
		body = append(body, b.Doc[at:c.start]...)
		at = c.end
	}
	out.Body = append(body, b.Doc[at:]...)
	return out, nil
}

// span is a range of bytes, [start, end).
type span struct{ start, end int }

// remover collects the byte ranges a Remove cuts.
type remover struct {
	b    *Batch
	ds   []int // the dropped entries, in body order
	cuts []span
	err  error
}

var errNotInDocument = errors.New("removing entries: an entry is not where its indices say; was the batch built from this document?")

// level removes the dropped entries ds[from:to], which share their first
// L indices, from the array at wildcard level L below base (the element
// those indices name, or the document for L = 0). Level L's array is the
// one the path's wildcard L walks or, past the last wildcard, the array
// the path ended on. It reports whether the array was left empty, in
// which case the caller removes base itself and forgets the cuts made
// inside it.
func (r *remover) level(base, L, from, to int) (emptied bool) {
	doc, p := r.b.Doc, r.b.Path
	start, end := 0, len(p.segs)
	if L > 0 {
		start = p.wild[L-1] + 1
	}
	if L < len(p.wild) {
		end = p.wild[L]
	}
	arr, ok := follow(doc, base, p.segs[start:end])
	if !ok || at(doc, arr) != '[' {
		r.err = errNotInDocument
		return false
	}
	ents := r.b.Entries
	runStart, runEnd, keptEnd := -1, -1, -1 // the open run of removed elements; the last kept element's end
	it := iterate(doc, arr)
	for from < to || runStart >= 0 {
		k, s, e, ok := it.next()
		if !ok {
			break
		}
		removed := false
		if from < to && ents[r.ds[from]].Indices[L] == k {
			next := from + 1
			for next < to && ents[r.ds[next]].Indices[L] == k {
				next++
			}
			if len(ents[r.ds[from]].Indices) == L+1 {
				removed = true // the entry is this element
			} else {
				mark := len(r.cuts)
				if removed = r.level(s, L+1, from, next); removed {
					r.cuts = r.cuts[:mark] // the whole element goes
				}
			}
			from = next
		}
		switch {
		case removed && runStart < 0:
			runStart, runEnd = s, e
		case removed:
			runEnd = e
		case runStart >= 0: // a kept element closes the run
			if keptEnd >= 0 {
				r.cuts = append(r.cuts, span{keptEnd, runEnd}) // ", removed"
			} else {
				r.cuts = append(r.cuts, span{runStart, s}) // "removed, "
			}
			runStart, keptEnd = -1, e
		default:
			keptEnd = e
		}
	}
	if from < to {
		r.err = errNotInDocument
		return false
	}
	if runStart < 0 {
		return false
	}
	if keptEnd >= 0 {
		r.cuts = append(r.cuts, span{keptEnd, runEnd})
		return false
	}
	// Every element went: empty the brackets. it.pos is the ']' once the
	// iterator is done, and it is: the loop ends only when it runs out
	// while a run is open.
	r.cuts = append(r.cuts, span{arr + 1, it.pos})
	return true
}
