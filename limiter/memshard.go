package limiter

import (
	"bytes"
	"sync"
)

// A memShard holds its keys without a single Go pointer per key: each key
// and its value (the Redis store's format, see blob.go) lie side by side in
// one byte arena, found through a map from the key's hash to a slot. The
// garbage collector never looks inside a shard, so a store of millions of
// recipients costs it nothing to mark (a map of pointers per recipient made
// every collection walk them all, which with one core meant tens of
// milliseconds of added latency).
type memShard struct {
	mu sync.Mutex
	// index maps a key's hash to its first slot and where that slot's key
	// lies in the arena (see head); keys whose hashes collide chain through
	// memSlot.next.
	index map[uint64]uint64
	slots []memSlot
	free  []int32 // unused slots
	arena []byte
	// garbage is how many arena bytes no slot uses any more; past half the
	// arena, the live ones are copied into a new one.
	garbage int
	live    int
	swept   int // the slot the sweeper looks at next
}

// memSlot is one key: arena[off:off+keyLen] is the key, and its value
// follows, valLen bytes in a room of valCap.
type memSlot struct {
	hash                        uint64
	expireAt                    int64 // ms; 0 for an unused slot
	off, keyLen, valLen, valCap uint32
	next                        int32 // the next slot with the same hash, or -1
}

// compactMin is the least garbage worth compacting a shard for.
const compactMin = 16 << 10

func (sh *memShard) key(i int32) []byte {
	s := &sh.slots[i]
	return sh.arena[s.off : s.off+s.keyLen]
}

func (sh *memShard) value(i int32) []byte {
	s := &sh.slots[i]
	v := s.off + s.keyLen
	return sh.arena[v : v+s.valLen]
}

// head packs the index entry of slot i: the slot, and its key's offset in
// the arena. With the offset in the entry, find reads the key and the slot
// at once rather than one after the other: a decision's lookup is a chain
// of cache misses (the index, the slot, the arena), and this takes one
// link out of it.
func head(i int32, off uint32) uint64 { return uint64(off)<<32 | uint64(uint32(i)) }

// firstSlot is the slot of an index entry.
func firstSlot(e uint64) int32 { return int32(uint32(e)) }

// setHead points the index entry of hash at slot i.
func (sh *memShard) setHead(hash uint64, i int32) { sh.index[hash] = head(i, sh.slots[i].off) }

// find returns the slot of key, or -1.
func (sh *memShard) find(hash uint64, key []byte) int32 {
	e, ok := sh.index[hash]
	if !ok {
		return -1
	}
	i, off := firstSlot(e), uint32(e>>32)
	if end := int(off) + len(key); end <= len(sh.arena) && bytes.Equal(sh.arena[off:end], key) && int(sh.slots[i].keyLen) == len(key) {
		return i
	}
	for i = sh.slots[i].next; i >= 0; i = sh.slots[i].next {
		if bytes.Equal(sh.key(i), key) {
			return i
		}
	}
	return -1
}

// remove forgets slot i.
func (sh *memShard) remove(i int32) {
	s := &sh.slots[i]
	if first := firstSlot(sh.index[s.hash]); first == i {
		if s.next >= 0 {
			sh.setHead(s.hash, s.next)
		} else {
			delete(sh.index, s.hash)
		}
	} else {
		for j := first; j >= 0; j = sh.slots[j].next {
			if sh.slots[j].next == i {
				sh.slots[j].next = s.next
				break
			}
		}
	}
	sh.garbage += int(s.keyLen + s.valCap)
	*s = memSlot{}
	sh.free = append(sh.free, i)
	sh.live--
}

// put stores val as the value of key (slot i, or -1 for a new key) until
// expireAt, and returns its slot.
func (sh *memShard) put(i int32, hash uint64, key, val []byte, expireAt int64) int32 {
	added := i < 0
	if !added {
		s := &sh.slots[i]
		s.expireAt = expireAt
		if len(val) <= int(s.valCap) {
			s.valLen = uint32(len(val))
			copy(sh.arena[s.off+s.keyLen:], val)
			return i
		}
		sh.garbage += int(s.keyLen + s.valCap)
	} else {
		if n := len(sh.free); n > 0 {
			i, sh.free = sh.free[n-1], sh.free[:n-1]
		} else {
			sh.slots = append(sh.slots, memSlot{})
			i = int32(len(sh.slots) - 1)
		}
		next := int32(-1)
		if e, ok := sh.index[hash]; ok {
			next = firstSlot(e)
		}
		sh.slots[i] = memSlot{hash: hash, expireAt: expireAt, next: next}
		sh.live++
	}
	// A new room, with space to grow: most writes add a record or two.
	s := &sh.slots[i]
	s.off, s.keyLen, s.valLen = uint32(len(sh.arena)), uint32(len(key)), uint32(len(val))
	s.valCap = uint32(len(val) + len(val)/4 + 8)
	sh.arena = append(sh.arena, key...)
	sh.arena = append(sh.arena, val...)
	sh.arena = append(sh.arena, make([]byte, int(s.valCap)-len(val))...)
	if added || firstSlot(sh.index[hash]) == i {
		// A new key goes first in its hash's chain; a first key moved.
		sh.setHead(hash, i)
	}
	if sh.garbage > compactMin && sh.garbage > len(sh.arena)/2 {
		sh.compact()
	}
	return i
}

// compact copies the live keys and values into a new arena.
func (sh *memShard) compact() {
	arena := make([]byte, 0, len(sh.arena)-sh.garbage+len(sh.arena)/8)
	for i := range sh.slots {
		s := &sh.slots[i]
		if s.expireAt == 0 {
			continue
		}
		off := uint32(len(arena))
		arena = append(arena, sh.arena[s.off:s.off+s.keyLen+s.valCap]...)
		s.off = off
		if firstSlot(sh.index[s.hash]) == int32(i) {
			sh.setHead(s.hash, int32(i))
		}
	}
	sh.arena, sh.garbage = arena, 0
}

// sweep removes expired keys among the next n slots.
func (sh *memShard) sweep(now int64, n int) {
	for ; n > 0 && len(sh.slots) > 0; n-- {
		if sh.swept >= len(sh.slots) {
			sh.swept = 0
		}
		if s := &sh.slots[sh.swept]; s.expireAt != 0 && s.expireAt <= now {
			sh.remove(int32(sh.swept))
		}
		sh.swept++
	}
	if sh.garbage > compactMin && sh.garbage > len(sh.arena)/2 {
		sh.compact()
	}
}
