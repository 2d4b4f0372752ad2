package memstore

// slotPages is a shard's table of slots, in pages of slotPage slots, for
// the reason the arena is in pages (see pagedArena): a single slice was
// copied whole each time it grew, a tenth of a batch send's CPU in a store
// that keeps gaining recipients. The first page grows as a slice does, so
// a small store's shards stay small; the pages after it are allocated at
// their full size and never move. Nothing keeps a slot's address across an
// add.
type slotPages struct {
	pages [][]memSlot
	n     int32
}

// slotPage is the slots a page holds; a power of two, so that a slot's page
// and place are a shift and a mask.
const (
	slotPageBits = 10
	slotPage     = 1 << slotPageBits
)

// at returns slot i, which must be below len.
func (t *slotPages) at(i int32) *memSlot {
	return &t.pages[i>>slotPageBits][i&(slotPage-1)]
}

// len is the slots in the table, used or not.
func (t *slotPages) len() int32 { return t.n }

// add appends an unused slot and returns its index.
func (t *slotPages) add() int32 {
	pg := int(t.n >> slotPageBits)
	if pg == len(t.pages) {
		size := slotPage
		if pg == 0 {
			size = 8
		}
		t.pages = append(t.pages, make([]memSlot, 0, size))
	}
	t.pages[pg] = append(t.pages[pg], memSlot{})
	t.n++
	return t.n - 1
}
