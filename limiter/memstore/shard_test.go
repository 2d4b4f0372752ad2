package memstore

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// Keys whose hashes collide share an index entry and are told apart by
// their bytes; values that outgrow their room move, and the garbage this
// leaves is compacted away without losing a live value.
func TestMemShardCollisionsGrowthCompaction(t *testing.T) {
	sh := &memShard{index: map[uint64]uint64{}}
	const n = 200
	val := func(k, round int) []byte { return []byte(fmt.Sprintf("%d:%s", k, string(make([]byte, round*7)))) }
	key := func(k int) []byte { return []byte("key" + strconv.Itoa(k)) }
	slot := make([]int32, n)
	for k := 0; k < n; k++ {
		slot[k] = sh.put(-1, uint64(k%3), key(k), val(k, 0), 1) // three hashes for 200 keys
	}
	for round := 1; round < 40; round++ {
		for k := 0; k < n; k++ {
			slot[k] = sh.put(slot[k], uint64(k%3), key(k), val(k, round), 1)
		}
		if sh.garbage > compactMin && sh.garbage > sh.arena.used/2 {
			t.Fatalf("round %d: %d bytes of garbage in an arena of %d, not compacted", round, sh.garbage, sh.arena.used)
		}
	}
	for k := 0; k < n; k += 2 {
		sh.remove(sh.find(uint64(k%3), key(k)))
	}
	sh.compact()
	for k := 0; k < n; k++ {
		i := sh.find(uint64(k%3), key(k))
		if k%2 == 0 {
			if i >= 0 {
				t.Fatalf("removed key %d still found", k)
			}
			continue
		}
		if i < 0 || string(sh.value(i)) != string(val(k, 39)) {
			t.Fatalf("key %d: lost or wrong value after growth and compaction", k)
		}
	}
	if sh.live != n/2 {
		t.Fatalf("live = %d, want %d", sh.live, n/2)
	}
}

// The sweeper removes expired keys a bounded number of slots at a time.
func TestMemShardSweep(t *testing.T) {
	sh := &memShard{index: map[uint64]uint64{}}
	for k := 0; k < 100; k++ {
		sh.put(-1, uint64(k), []byte(strconv.Itoa(k)), []byte("v"), int64(1+k%2)) // half expire at 1, half at 2
	}
	sh.sweep(1, 40)
	if sh.live != 80 {
		t.Fatalf("after sweeping 40 slots at 1: %d live, want 80", sh.live)
	}
	sh.sweep(1, 1000)
	if sh.live != 50 {
		t.Fatalf("after sweeping all at 1: %d live, want 50", sh.live)
	}
}

// The memory store keeps no Go object per key: 100k recipients add a few
// hundred heap objects (arenas, slot arrays, map buckets), not hundreds of
// thousands, so a garbage collection does not walk them.
func TestMemoryHoldsNoObjectPerKey(t *testing.T) {
	m := New(Options{SweepInterval: -1})
	defer m.Close()
	rules := limitertest.SeedRules()
	at := limitertest.MustParse(t, "2026-05-01T10:00:00Z")
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	const recipients = 100_000
	for i := 0; i < recipients; i++ {
		r := limitertest.Req(at.Add(time.Duration(i)*time.Millisecond), limitertest.Vals{"recipient": "u" + strconv.Itoa(i), "content": "c" + strconv.Itoa(i%5)}, rules...)
		if _, err := m.Decide(context.Background(), r); err != nil {
			t.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	objects := int64(after.HeapObjects) - int64(before.HeapObjects)
	t.Logf("%d recipients: %d more heap objects, %d more heap bytes (%d per recipient)", recipients, objects, after.HeapAlloc-before.HeapAlloc, (after.HeapAlloc-before.HeapAlloc)/recipients)
	if m.Len() != recipients {
		t.Fatalf("Len = %d, want %d", m.Len(), recipients)
	}
	if objects > recipients/20 {
		t.Fatalf("%d heap objects for %d recipients: the store keeps objects per key", objects, recipients)
	}
}

// An arena's rooms never move: bytes written into a room read back the
// same after thousands of rooms more. A large room gets a page of its own
// and leaves the page small rooms fill open, so what full pages leave
// unused stays under a quarter of a page each.
func TestPagedArenaRooms(t *testing.T) {
	var a pagedArena
	type room struct {
		off uint32
		b   []byte
	}
	var rooms []room
	total := 0
	for i := 0; i < 5000; i++ {
		n := 1 + i%700
		switch {
		case i == 0:
			n = largeRoom - 1 // small, yet more than a first page holds
		case i%100 == 99:
			n = largeRoom + i // just over a quarter of a page, and more
		}
		pages := len(a.pages)
		off := a.room(n)
		b := a.bytes(off, n)
		if len(b) != n {
			t.Fatalf("room %d: %d bytes, want %d", i, len(b), n)
		}
		if n >= largeRoom && (off&(pageMax-1) != 0 || len(a.pages) != pages+1) {
			t.Fatalf("room %d of %d bytes shares a page", i, n)
		}
		for j := range b {
			b[j] = byte(i)
		}
		rooms = append(rooms, room{off, b})
		total += n
	}
	for i, r := range rooms {
		got := a.bytes(r.off, len(r.b))
		if &got[0] != &r.b[0] {
			t.Fatalf("room %d moved", i)
		}
		for _, c := range got {
			if c != byte(i) {
				t.Fatalf("room %d overwritten", i)
			}
		}
	}
	if a.used != total {
		t.Fatalf("used = %d, want the rooms' %d", a.used, total)
	}
	if full := len(a.pages) - 50 - 1; a.unused >= full*pageMax/4 {
		t.Fatalf("%d bytes unused at the ends of %d full pages", a.unused, full)
	}
	if a.bytes(uint32(len(a.pages))<<pageBits, 1) != nil || a.bytes(0, pageMax+1) != nil {
		t.Fatal("bytes outside what was handed out were returned")
	}
}

// What full pages leave unused is not garbage: compacting cannot take it
// back, so counting it would compact again and again. A shard that only
// gains keys, here with values of just over half a page, has none.
func TestMemShardLargeValuesMakeNoGarbage(t *testing.T) {
	sh := &memShard{index: map[uint64]uint64{}}
	val := make([]byte, pageMax/2+100)
	for k := 0; k < 100; k++ {
		sh.put(-1, uint64(k), []byte(strconv.Itoa(k)), val, 1)
	}
	if sh.garbage != 0 {
		t.Fatalf("%d bytes of garbage in a shard that only gained keys", sh.garbage)
	}
	for k := 0; k < 100; k++ {
		if i := sh.find(uint64(k), []byte(strconv.Itoa(k))); i < 0 || len(sh.value(i)) != len(val) {
			t.Fatalf("key %d lost", k)
		}
	}
}

// Every slot is found where it was put, and one past the first page (which
// grows as a slice does) never moves as the table grows.
func TestSlotPages(t *testing.T) {
	var tab slotPages
	var first []*memSlot
	for i := int32(0); i < 3*slotPage+5; i++ {
		if got := tab.add(); got != i {
			t.Fatalf("add = %d, want %d", got, i)
		}
		tab.at(i).hash = uint64(i) * 7
		first = append(first, tab.at(i))
	}
	for i := range tab.len() {
		if s := tab.at(i); s.hash != uint64(i)*7 || (i >= slotPage && s != first[i]) {
			t.Fatalf("slot %d moved or changed", i)
		}
	}
}

// A visit of a shard keeps sweeping while a batch finds many keys expired,
// so the sweeper keeps up with keys that expire faster than a batch a
// visit (a sender spraying new recipients): one visit clears 20,000
// expired keys of a shard, where one batch cleared 512. It stops at the
// first batch that finds few.
func TestSweepKeepsUpWithManyExpiredKeys(t *testing.T) {
	sh := &memShard{index: map[uint64]uint64{}}
	const n = 20_000
	for k := 0; k < n; k++ {
		sh.put(-1, uint64(k), []byte(strconv.Itoa(k)), []byte("v"), 1)
	}
	sweepShard(sh, 1)
	if sh.live != 0 {
		t.Fatalf("after one visit at 1: %d live, want 0", sh.live)
	}
	for k := 0; k < n; k++ {
		sh.put(-1, uint64(k), []byte(strconv.Itoa(k)), []byte("v"), 5)
	}
	sweepShard(sh, 1) // nothing expired: one batch, nothing removed
	if sh.live != n {
		t.Fatalf("a visit removed live keys: %d live, want %d", sh.live, n)
	}
}
