package jsonbatch

import (
	"errors"
	"fmt"
	"strings"
)

// DefaultMax is the number of entries Enumerate allows when it is given
// no maximum: the default of max_batch.
const DefaultMax = 1000

// ErrTooMany is returned (wrapped) by Enumerate for a document with more
// entries than its maximum; the handler answers it with 413.
var ErrTooMany = errors.New("too many entries")

// Batch is the result of Path.Enumerate: the document and the entries and
// missing values its path names.
type Batch struct {
	Doc  []byte
	Path *Path
	// Entries are the values found, in body order.
	Entries []Entry
	// Missing are the places where the path led nowhere or to null, in
	// body order. A dimension with on_missing reject refuses a batch with
	// any; with skip they are simply not entries.
	Missing []Miss
	// single is set when Doc is a message sent as an object, read as
	// an array of it (EnumerateMessages); Doc is then that array.
	single bool
	// elems holds, for each entry at Entry.tuple, the start in Doc of the
	// element each of its Indices names, so that Resolve goes straight to
	// an entry's message.
	elems []int
}

// Entry is one recipient entry: a value the batch path names.
type Entry struct {
	Value
	// Indices holds the element index at each of the path's wildcards, in
	// order, plus a last one when the path ended on an array and this is
	// one of its elements. Its last index is the element Remove deletes;
	// an entry without indices has no element to delete.
	Indices []int
	// Start and End delimit the value's bytes in Doc.
	Start, End int
	// Alt is the alternative of the batch path that named the entry (see
	// Alternatives): 0 for a path without alternatives.
	Alt int
	// tuple is where Indices start in Batch.elems.
	tuple int
}

// Miss is one place where the path found nothing: a member absent, an
// index out of range, a wildcard on something that is not an array, or
// null (including a null element of an array the path ended on).
type Miss struct {
	// Path is the concrete path as far as the walk got, with the
	// wildcards it did not reach left as "*": "notifications.2.tokens.*"
	// when notification 2 has no tokens, "3.to" when message 3 has no
	// recipient.
	Path    string
	Indices []int
	// NotArray is, when a wildcard met a value that is not an array, the
	// kind of that value (the body's shape is not the path's); Missing
	// when the path found nothing or null.
	NotArray Kind
	// alt is the alternative whose walk missed (see Entry.Alt).
	alt int
}

// Enumerate lists the values p names in doc, which must have passed
// Valid.
//
// Each "*" yields every element of an array (on anything else it finds
// nothing: a Miss). When the value at the end of the path is an array, it
// is expanded once: each of its elements is an entry, with one index more
// than p has wildcards, so "*.to" serves Expo's "to": "x" (entry "0.to")
// and "to": ["x","y"] (entries "0.to.0" and "0.to.1"). Elements of that
// array that are themselves objects or arrays are not expanded further:
// they are entries whose Value is their compact JSON (Kind Object or
// Array), as any object or array found at the end of the path is; the
// caller decides whether such a recipient is acceptable. An empty array
// yields no entry and no Miss: it names nobody.
//
// max bounds len(Entries)+len(Missing) (0 means DefaultMax): past it,
// Enumerate stops at once and returns an error wrapping ErrTooMany.
//
// A path with alternatives or a reader is enumerated as Alternatives and
// WithReader say.
func (p *Path) Enumerate(doc []byte, max int) (*Batch, error) {
	if max <= 0 {
		max = DefaultMax
	}
	if len(p.alts) > 0 || p.reader != nil {
		return p.enumerateEach(doc, max)
	}
	return p.enumerate(doc, max)
}

// enumerate is Enumerate for a path without alternatives, its reader
// aside.
func (p *Path) enumerate(doc []byte, max int) (*Batch, error) {
	w := newWalker(doc, p, true, max)
	defer w.done()
	w.run()
	if w.over {
		return nil, fmt.Errorf("%w: more than %d", ErrTooMany, max)
	}
	b := &Batch{Doc: doc, Path: p}
	// The index tuples and element starts are copied out of the walk's
	// scratch, into one array of their size.
	n := len(w.idxs)
	kept := make([]int, 2*n)
	copy(kept, w.idxs)
	copy(kept[n:], w.elems)
	indices := func(h hit) []int { return kept[h.from:h.to:h.to] }
	if len(w.found) > 0 {
		// Rendered text is at most as long as the bytes it comes from
		// (but for an object's escapes), so one buffer of their size
		// holds it all without growing.
		size := 0
		for _, h := range w.found {
			size += h.end - h.start
		}
		t := texts{ends: make([]int, 0, len(w.found))}
		t.buf.Grow(size)
		b.Entries = make([]Entry, len(w.found))
		for i, h := range w.found {
			e := &b.Entries[i]
			e.Kind = kindAt(doc, h.start)
			e.Indices, e.tuple = indices(h), h.from
			e.Start, e.End = h.start, h.end
			t.add(doc, h.start, h.end, e.Kind)
		}
		t.each(func(i int, text string) { b.Entries[i].Text = text })
		b.elems = kept[n:]
	}
	for _, h := range w.missing {
		idx := indices(h)
		b.Missing = append(b.Missing, Miss{Path: b.concrete(0, idx), Indices: idx, NotArray: h.got})
	}
	return b, nil
}

// EntryPath returns the concrete path of entry i, such as
// "notifications.0.tokens.3" or, for an element of an array the path
// ended on, "2.to.1". Paths are built on demand because only the dropped
// or denied entries need one.
func (b *Batch) EntryPath(i int) string {
	return b.concrete(b.Entries[i].Alt, b.Entries[i].Indices)
}

// concrete is the path of idx, in alternative alt, in the body as the
// sender wrote it: for a message sent as an object (see
// EnumerateMessages), without the index of the array it was read as.
func (b *Batch) concrete(alt int, idx []int) string {
	path := b.Path.alt(alt).concrete(idx)
	if b.single {
		path = strings.TrimPrefix(strings.TrimPrefix(path, "0"), ".")
	}
	return path
}

// EnumerateMessages is Enumerate for an API that takes one message as an
// object as well as an array of them, as Expo's does: when p starts with
// a wildcard and doc is an object, doc is read as an array holding that
// one object. The Batch's paths then leave out that array's index ("to",
// "to.1"; "" for the object itself), and Remove gives back an object.
// Single reports which form doc was.
func (p *Path) EnumerateMessages(doc []byte, max int) (*Batch, error) {
	start := skipSpace(doc, 0)
	if !p.StartsWild() || at(doc, start) != '{' {
		return p.Enumerate(doc, max)
	}
	wrapped := make([]byte, 0, len(doc)+2)
	wrapped = append(append(append(wrapped, '['), doc...), ']')
	b, err := p.Enumerate(wrapped, max)
	if b != nil {
		b.single = true
		for i := range b.Missing {
			b.Missing[i].Path = b.concrete(b.Missing[i].alt, b.Missing[i].Indices)
		}
	}
	return b, err
}

// Single reports that the document was one message sent as an object
// and read as an array of it (see EnumerateMessages).
func (b *Batch) Single() bool { return b.single }

// unwrap takes a removal's body of a single message back out of the
// array it was read as; when every entry was dropped, nothing is left of
// it but the empty array.
func (b *Batch) unwrap(r *Removal) {
	if !b.single || r.NothingLeft || len(r.Body) < 2 {
		return
	}
	r.Body = r.Body[1 : len(r.Body)-1]
}
