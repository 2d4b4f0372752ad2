package jsonbatch

import "sync"

// walker visits the values a path names in a document, in body order,
// recording each as found or missing. Indices, and the starts of the
// elements they name, are recorded into shared slices, so a walk
// allocates per batch, not per value; and those are scratch kept from
// walk to walk (see scratchPool), which the caller copies what it keeps
// out of before it calls done.
type walker struct {
	doc    []byte
	p      *Path
	expand bool // a value that is an array yields each of its elements
	limit  int  // stop once found+missing exceeds limit (0: never)

	idx []int // the indices of the wildcards being walked
	pos []int // the starts of the elements idx names
	scratch
	over bool // stopped at limit+1
	// got is the kind of value a wildcard last met instead of an array,
	// for the next missing record; Missing when it met nothing.
	got Kind
}

// scratch is what a walk records.
type scratch struct {
	idxs    []int // every recorded index tuple, back to back
	elems   []int // every recorded pos, parallel to idxs
	found   []hit
	missing []hit
}

// scratchPool keeps walks' scratch: a batch of hundreds of entries would
// otherwise grow each slice from nothing, copying as it goes, and throw
// it all away.
var scratchPool = sync.Pool{New: func() any { return new(scratch) }}

// newWalker returns a walker with scratch from the pool.
func newWalker(doc []byte, p *Path, expand bool, limit int) *walker {
	s := scratchPool.Get().(*scratch)
	return &walker{doc: doc, p: p, expand: expand, limit: limit, scratch: scratch{
		idxs: s.idxs[:0], elems: s.elems[:0], found: s.found[:0], missing: s.missing[:0],
	}}
}

// done gives the walker's scratch back to the pool: nothing may be read
// from it after.
func (w *walker) done() {
	s := w.scratch
	w.scratch = scratch{}
	scratchPool.Put(&s)
}

// hit is one recorded value: its index tuple idxs[from:to] and, when it
// was found, its span.
type hit struct {
	from, to   int
	start, end int
	got        Kind // of a missing hit: see walker.got
}

// run walks the whole document.
func (w *walker) run() {
	w.idx = make([]int, 0, len(w.p.wild)+1)
	w.pos = make([]int, 0, len(w.p.wild)+1)
	w.from(skipSpace(w.doc, 0), 0)
}

// from walks the path's segments from si on, starting at the value at
// doc[pos]. It recurses once per wildcard (at most MaxSegments deep) and
// returns false once the limit is passed.
func (w *walker) from(pos, si int) bool {
	doc, segs := w.doc, w.p.segs
	for ; si < len(segs); si++ {
		s := &segs[si]
		c := at(doc, pos)
		if s.wild {
			if c != '[' {
				w.got = kindAt(doc, pos)
				return w.record(false, 0, 0)
			}
			n := len(w.idx)
			for it := iterate(doc, pos); ; {
				k, start, _, ok := it.next()
				if !ok {
					break
				}
				if s.filter != nil && !s.filter.admits(doc, start) {
					continue
				}
				w.idx, w.pos = append(w.idx[:n], k), append(w.pos[:n], start)
				if !w.from(start, si+1) {
					return false
				}
			}
			w.idx, w.pos = w.idx[:n], w.pos[:n]
			return true
		}
		ok := false
		switch c {
		case '{':
			pos, ok = member(doc, pos, s.name)
		case '[':
			if s.index >= 0 {
				pos, ok = element(doc, pos, s.index)
			}
		}
		if !ok {
			return w.record(false, 0, 0)
		}
	}
	switch c := at(doc, pos); {
	case c == 'n' || c == 0:
		return w.record(false, 0, 0)
	case c == '[' && w.expand:
		n := len(w.idx)
		for it := iterate(doc, pos); ; {
			k, start, end, ok := it.next()
			if !ok {
				break
			}
			w.idx, w.pos = append(w.idx[:n], k), append(w.pos[:n], start)
			null := at(doc, start) == 'n'
			if !w.record(!null, start, end) {
				return false
			}
		}
		w.idx, w.pos = w.idx[:n], w.pos[:n]
		return true
	}
	return w.record(true, pos, skipValue(doc, pos))
}

// record notes a found or missing value at the current indices; it
// returns false once the limit is passed.
func (w *walker) record(found bool, start, end int) bool {
	from := len(w.idxs)
	w.idxs = append(w.idxs, w.idx...)
	w.elems = append(w.elems, w.pos...)
	h := hit{from: from, to: len(w.idxs), start: start, end: end, got: w.got}
	w.got = Missing
	if found {
		w.found = append(w.found, h)
	} else {
		w.missing = append(w.missing, h)
	}
	if w.limit > 0 && len(w.found)+len(w.missing) > w.limit {
		w.over = true
		return false
	}
	return true
}

// follow walks segs, none of them a wildcard, from the value at doc[pos]
// and returns the start of the value they lead to.
func follow(doc []byte, pos int, segs []segment) (int, bool) {
	for i := range segs {
		ok := false
		switch at(doc, pos) {
		case '{':
			pos, ok = member(doc, pos, segs[i].name)
		case '[':
			if segs[i].index >= 0 {
				pos, ok = element(doc, pos, segs[i].index)
			}
		}
		if !ok {
			return 0, false
		}
	}
	return pos, true
}
