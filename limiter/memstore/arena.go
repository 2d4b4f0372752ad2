package memstore

// A pagedArena is the byte store of one memory shard: rooms (a key, its
// value and space for the value to grow) laid out in pages that never move.
//
// One growing slice was simpler, but append copies the whole arena each
// time it outgrows its capacity: with a store that keeps gaining
// recipients, that copying and the zeroing of each new slice were two
// fifths of a batch send's CPU (BenchmarkHandlerBatch/memory), and one
// copy of a large shard held its lock for milliseconds. Pages are
// allocated once, at their full size; small rooms fill one page after
// another, and a room never spans two.
type pagedArena struct {
	pages [][]byte
	// fill is the page small rooms are handed out from, plus one (0: none
	// yet).
	fill int
	// used is the bytes handed out as rooms; unused is the bytes left at
	// the ends of full pages, which no room will ever take.
	used, unused int
}

const (
	// pageBits splits an arena offset into a page (the high bits) and a
	// position in it (the low bits).
	pageBits = 16
	// pageMax is the size of a page once the arena has grown.
	pageMax = 1 << pageBits
	// largeRoom is the least room that gets a page of its own, so that the
	// end a room leaves unused in a page is at most a quarter of it (rooms
	// of just over half a page, filling pages one a page, would leave
	// half of every page unused).
	largeRoom = pageMax/4 + 1
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

// room hands out n contiguous bytes and returns their offset. Past maxPages
// it panics, as running out of memory would: offsets are 32 bits, so the
// alternative is corrupt values.
func (a *pagedArena) room(n int) uint32 {
	a.used += n
	if n < largeRoom && a.fill > 0 {
		p := a.pages[a.fill-1]
		if len(p)+n <= cap(p) {
			a.pages[a.fill-1] = p[:len(p)+n]
			return uint32(a.fill-1)<<pageBits | uint32(len(p))
		}
	}
	if len(a.pages) >= maxPages {
		panic("limiter: a memory store shard is full (4 GiB)")
	}
	if n >= largeRoom {
		a.pages = append(a.pages, make([]byte, n))
		return uint32(len(a.pages)-1) << pageBits
	}
	size := pageFirst
	if a.fill > 0 {
		full := a.pages[a.fill-1]
		a.unused += cap(full) - len(full)
		size = min(cap(full)*3/2, pageMax)
	}
	a.pages = append(a.pages, make([]byte, n, max(size, n)))
	a.fill = len(a.pages)
	return uint32(a.fill-1) << pageBits
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
