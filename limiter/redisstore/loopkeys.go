package redisstore

import (
	"hash/maphash"
)

// This file keeps two batches of one gateway in flight from sharing a key.
// Off a cluster a lane has two loops (Options.InFlight), which take calls
// from one queue, so that at low load a call never waits for a busy loop
// while the other is free. But two sends to one recipient could then ride
// in both loops' batches at once, and the later write would find the key
// changed by the earlier, go to freqcap.lua and make the key hot for a
// while: a sender hammering one recipient, the very case caps are for,
// would cost Redis a script run a decision. So a loop claims the keys of
// the calls it takes until they are answered, and a call whose key another
// loop has claimed is handed to that loop: it rides in that loop's next
// batch, whose read follows its write of the key in the same round trip.

// loopSeed hashes keys for the loops' claims. A collision only hands a
// call to a loop that did not need it.
var loopSeed = maphash.MakeSeed()

// claim keeps the calls of batch that no other loop of the lane has a key
// of in flight, and claims their keys for bl until release; it hands each
// other call to the loop that has. The hashes of the keys claimed are
// added to bl.taken.
func (bl *batchLoop) claim(batch []*call) []*call {
	l := bl.l
	if len(l.loops) < 2 {
		return batch
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	kept := batch[:0]
	for _, c := range batch {
		n := len(bl.taken)
		for _, si := range c.secs {
			bl.taken = append(bl.taken, maphash.Bytes(loopSeed, c.p.Key(&c.p.Sections[si])))
		}
		hashes := bl.taken[n:]
		if o := bl.holder(hashes); o != nil {
			bl.taken = bl.taken[:n]
			o.handed = append(o.handed, c)
			o.nHanded.Add(1)
			select {
			case o.wake <- struct{}{}:
			default: // already told
			}
			continue
		}
		for _, h := range hashes {
			bl.keys[h]++
		}
		kept = append(kept, c)
	}
	return kept
}

// holder returns the other loop that has a key hashed in hashes in
// flight, or nil. l.mu is held.
func (bl *batchLoop) holder(hashes []uint64) *batchLoop {
	for _, o := range bl.l.loops {
		if o == bl || len(o.keys) == 0 {
			continue
		}
		for _, h := range hashes {
			if o.keys[h] > 0 {
				return o
			}
		}
	}
	return nil
}

// release ends bl's claims on the keys hashed in taken: their calls are
// answered.
func (bl *batchLoop) release(taken []uint64) {
	if len(taken) == 0 {
		return
	}
	l := bl.l
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, h := range taken {
		if bl.keys[h]--; bl.keys[h] <= 0 {
			delete(bl.keys, h)
		}
	}
}

// nextHanded takes the first call handed over to bl, if there is one (of
// op, unless op is "").
func (bl *batchLoop) nextHanded(op string) *call {
	if bl.nHanded.Load() == 0 {
		return nil
	}
	l := bl.l
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(bl.handed) == 0 || (op != "" && bl.handed[0].op != op) {
		return nil
	}
	c := bl.handed[0]
	bl.handed[0] = nil
	bl.handed = bl.handed[1:]
	bl.nHanded.Add(-1)
	return c
}
