package memstore

import (
	"bytes"
	"sync"
)

// A memShard holds its keys without a single Go pointer per key: each key
// and its value (the Redis store's format, see limiter/internal/recordlog) lie side by side in
// a byte arena (see pagedArena), found through a map from the key's hash to
// a slot. The garbage collector never looks inside a shard, so a store of
// millions of recipients costs it nothing to mark (a map of pointers per
// recipient made every collection walk them all, which with one core meant
// tens of milliseconds of added latency).
type memShard struct {
	mu sync.Mutex
	// index maps a key's hash to its first slot and where that slot's key
	// lies in the arena (see head); keys whose hashes collide chain through
	// memSlot.next.
	index map[uint64]uint64
	slots slotPages
	free  []int32 // unused slots
	arena pagedArena
	// garbage is how many bytes of the arena's rooms no slot uses any
	// more; past half of them, the live rooms are copied into a new arena.
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
	s := sh.slots.at(i)
	return sh.arena.bytes(s.off, int(s.keyLen))
}

func (sh *memShard) value(i int32) []byte {
	s := sh.slots.at(i)
	return sh.arena.bytes(s.off, int(s.keyLen+s.valLen))[s.keyLen:]
}

// room is slot i's whole room: its key, then its value's capacity.
func (sh *memShard) room(i int32) []byte {
	s := sh.slots.at(i)
	return sh.arena.bytes(s.off, int(s.keyLen+s.valCap))
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
func (sh *memShard) setHead(hash uint64, i int32) { sh.index[hash] = head(i, sh.slots.at(i).off) }

// find returns the slot of key, or -1.
func (sh *memShard) find(hash uint64, key []byte) int32 {
	e, ok := sh.index[hash]
	if !ok {
		return -1
	}
	i, off := firstSlot(e), uint32(e>>32)
	if k := sh.arena.bytes(off, len(key)); k != nil && bytes.Equal(k, key) && int(sh.slots.at(i).keyLen) == len(key) {
		return i
	}
	for i = sh.slots.at(i).next; i >= 0; i = sh.slots.at(i).next {
		if bytes.Equal(sh.key(i), key) {
			return i
		}
	}
	return -1
}

// remove forgets slot i.
func (sh *memShard) remove(i int32) {
	s := sh.slots.at(i)
	if first := firstSlot(sh.index[s.hash]); first == i {
		if s.next >= 0 {
			sh.setHead(s.hash, s.next)
		} else {
			delete(sh.index, s.hash)
		}
	} else {
		for j := first; j >= 0; j = sh.slots.at(j).next {
			if sh.slots.at(j).next == i {
				sh.slots.at(j).next = s.next
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
		s := sh.slots.at(i)
		s.expireAt = expireAt
		if len(val) <= int(s.valCap) {
			s.valLen = uint32(len(val))
			copy(sh.room(i)[s.keyLen:], val)
			return i
		}
		sh.garbage += int(s.keyLen + s.valCap)
	} else {
		if n := len(sh.free); n > 0 {
			i, sh.free = sh.free[n-1], sh.free[:n-1]
		} else {
			i = sh.slots.add()
		}
		next := int32(-1)
		if e, ok := sh.index[hash]; ok {
			next = firstSlot(e)
		}
		*sh.slots.at(i) = memSlot{hash: hash, expireAt: expireAt, next: next}
		sh.live++
	}
	// A new room, with space to grow: most writes add a record or two.
	s := sh.slots.at(i)
	s.keyLen, s.valLen = uint32(len(key)), uint32(len(val))
	s.valCap = uint32(len(val) + len(val)/4 + 8)
	s.off = sh.arena.room(int(s.keyLen + s.valCap))
	room := sh.room(i)
	copy(room, key)
	copy(room[len(key):], val)
	if added || firstSlot(sh.index[hash]) == i {
		// A new key goes first in its hash's chain; a first key moved.
		sh.setHead(hash, i)
	}
	sh.compactIfWasteful()
	return i
}

// compactIfWasteful compacts the shard once garbage is most of its arena.
func (sh *memShard) compactIfWasteful() {
	if sh.garbage > compactMin && sh.garbage > sh.arena.used/2 {
		sh.compact()
	}
}

// compact copies the live keys and values into a new arena.
func (sh *memShard) compact() {
	var arena pagedArena
	for i := range sh.slots.len() {
		s := sh.slots.at(i)
		if s.expireAt == 0 {
			continue
		}
		old := sh.room(i)
		s.off = arena.room(len(old))
		copy(arena.bytes(s.off, len(old)), old)
		if firstSlot(sh.index[s.hash]) == i {
			sh.setHead(s.hash, i)
		}
	}
	sh.arena, sh.garbage = arena, 0
}

// sweep removes expired keys among the next n slots, and returns how many
// it removed.
func (sh *memShard) sweep(now int64, n int) (removed int) {
	for ; n > 0 && sh.slots.len() > 0; n-- {
		if sh.swept >= int(sh.slots.len()) {
			sh.swept = 0
		}
		if s := sh.slots.at(int32(sh.swept)); s.expireAt != 0 && s.expireAt <= now {
			sh.remove(int32(sh.swept))
			removed++
		}
		sh.swept++
	}
	sh.compactIfWasteful()
	return removed
}
