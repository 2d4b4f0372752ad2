package limiter

// A pagedArena is the byte store of one memory shard: rooms (a key, its
// value and space for the value to grow) laid out in pages that never move.
//
// One growing slice was simpler, but append copies the whole arena each
// time it outgrows its capacity: with a store that keeps gaining
// recipients, that copying and the zeroing of each new slice were two
// fifths of a batch send's CPU (BenchmarkHandlerBatch/memory), and one
// copy of a large shard held its lock for milliseconds. Pages are
// allocated once, at their full size, and filled in order; a room never
// spans two.
type pagedArena struct {
	pages [][]byte
	// used is the bytes handed out, the unused tail of each full page
	// included (it counts as garbage).
	used int
}

const (
	// pageBits splits an arena offset into a page (the high bits) and a
	// position in it (the low bits).
	pageBits = 16
	// pageMax is the size of a page once the arena has grown; a room
	// larger than that gets a page of its own.
	pageMax = 1 << pageBits
	// pageFirst is the size of a shard's first page: most shards of a small
	// store never need more. Each next page is half as large again, up to
	// pageMax, so that the unused part of the last page stays a small part
	// of the arena (doubling cost a store of 100,000 recipients a fifth
	// more memory).
	pageFirst = 4 << 10
	// maxPages bounds the pages, so that every offset fits in 32 bits: at
	// least 4 GiB a shard, a terabyte a store.
	maxPages = 1 << (32 - pageBits)
)

// room hands out n contiguous bytes and returns their offset, and how many
// bytes at the end of the last page it left unused. Past maxPages it
// panics, as running out of memory would: offsets are 32 bits, so the
// alternative is corrupt values.
func (a *pagedArena) room(n int) (off uint32, tail int) {
	if last := len(a.pages) - 1; last >= 0 {
		p := a.pages[last]
		if len(p)+n <= cap(p) {
			a.pages[last] = p[:len(p)+n]
			a.used += n
			return uint32(last)<<pageBits | uint32(len(p)), 0
		}
		tail = cap(p) - len(p) // the rest of a full page is never used
	}
	if len(a.pages) >= maxPages {
		panic("limiter: a memory store shard is full (4 GiB)")
	}
	size := pageFirst
	if last := len(a.pages) - 1; last >= 0 {
		size = min(cap(a.pages[last])*3/2, pageMax)
	}
	size = max(size, n)
	a.pages = append(a.pages, make([]byte, n, size))
	a.used += tail + n
	return uint32(len(a.pages)-1) << pageBits, tail
}

// bytes returns the n bytes at off, or nil when they lie outside what was
// handed out.
func (a *pagedArena) bytes(off uint32, n int) []byte {
	pg, at := int(off>>pageBits), int(off&(pageMax-1))
	if pg >= len(a.pages) || at+n > len(a.pages[pg]) {
		return nil
	}
	return a.pages[pg][at : at+n : at+n]
}
