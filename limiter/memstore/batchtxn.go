package memstore

import (
	"bytes"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"
)

// batchTxn is a batch's transaction on the memory store: a memTxn whose
// keys are all known when it locks. Its lock finds, once, which sections of
// the batch share a key, so deciding an entry reaches its keys by index:
// no hashing again, no map of the transaction's keys to fill and search
// (which cost a batch more per entry than a single decision).
type batchTxn struct {
	memTxn
	// keyOf is the key of each section of the batch (the plans' sections
	// one after the other), as an index into memTxn.keys.
	keyOf []int32
	// state is each key's: not looked up yet, missing, or held.
	state []keyState
	// Scratch for lock.
	secKeys  [][]byte // each section's key
	byShard  []int32  // the sections, grouped by shard
	perShard [memShards + 1]int32
}

type keyState uint8

const (
	keyUnread  keyState = iota // not looked up yet: txnKey.slot is where lock found it, or -1
	keyMissing                 // not stored (or expired, or corrupt): nil until created
	keyHeld                    // decoded (or created) in txnKey.k
)

// lock hashes the key of every section of plans, gives each distinct key
// a txnKey, takes the shard locks in index order, as memTxn.lock does, and
// finds each key's slot (read and decoded when an entry first asks). Before deciding plans[i], the caller sets base to the
// number of sections of the plans before it.
func (tx *batchTxn) lock(plans []limiter.Plan) {
	m := tx.m
	tx.perShard = [memShards + 1]int32{}
	for i := range plans {
		p := &plans[i]
		base := len(tx.hashes)
		for si := range p.Sections {
			key := p.Key(&p.Sections[si])
			h, seen := uint64(0), false
			// A plan's sections often share a key (one per sub-log):
			// hash it once.
			for j := base; j < len(tx.hashes); j++ {
				if bytes.Equal(tx.secKeys[j], key) {
					h, seen = tx.hashes[j], true
					break
				}
			}
			if !seen {
				h = m.hash(key)
			}
			tx.hashes = append(tx.hashes, h)
			tx.secKeys = append(tx.secKeys, key)
			tx.perShard[h%memShards+1]++
		}
	}
	// Group the sections by shard (a counting sort: the shards come out in
	// index order, and a shard's few sections are compared among
	// themselves only).
	n := len(tx.hashes)
	for i := 1; i <= memShards; i++ {
		tx.perShard[i] += tx.perShard[i-1]
	}
	tx.byShard = grow(tx.byShard, n)
	tx.keyOf = grow(tx.keyOf, n)
	next := tx.perShard // where each shard's next section goes
	for g, h := range tx.hashes {
		i := h % memShards
		tx.byShard[next[i]] = int32(g)
		next[i]++
	}
	for s := range memShards {
		from, to := tx.perShard[s], tx.perShard[s+1]
		if from == to {
			continue
		}
		tx.shards = append(tx.shards, s)
		first := tx.n // this shard's first key
		for _, g := range tx.byShard[from:to] {
			h, key := tx.hashes[g], tx.secKeys[g]
			k := first
			for ; k < tx.n; k++ {
				if tk := tx.keys[k]; tk.hash == h && bytes.Equal(tk.key, key) {
					break
				}
			}
			if k == tx.n {
				tk := tx.next()
				tk.sh, tk.hash, tk.slot, tk.key, tk.touched = &m.shards[s], h, -1, key, false
				tx.state = append(tx.state, keyUnread)
			}
			tx.keyOf[g] = int32(k)
		}
	}
	for _, i := range tx.shards {
		m.shards[i].mu.Lock()
	}
	// Find every key's slot in one pass: the lookups are independent, so
	// the processor overlaps their cache misses (one lookup is a chain of
	// them), which it cannot do with a decision between each. A slot stays
	// where it is until commit writes.
	for _, tk := range tx.keys[:tx.n] {
		tk.slot = tk.sh.find(tk.hash, tk.key)
	}
}

// grow returns s with length n, its old contents lost.
func grow[T any](s []T, n int) []T {
	if cap(s) < n {
		return make([]T, n)
	}
	return s[:n]
}

// key returns the key of section si of the plan being decided.
func (tx *batchTxn) key(si int) *txnKey { return tx.keys[tx.keyOf[tx.base+si]] }

// Lookup implements keySource: the key is read from its shard the first
// time an entry asks for it, and from the transaction after.
func (tx *batchTxn) Lookup(p *limiter.Plan, si int, now int64) *recordlog.KeyLogs {
	ki := tx.keyOf[tx.base+si]
	tk := tx.keys[ki]
	switch tx.state[ki] {
	case keyHeld:
		tk.k.Prune(now)
		return &tk.k
	case keyMissing:
		return nil
	}
	tx.state[ki] = keyMissing
	sh, i := tk.sh, tk.slot
	if i < 0 {
		return nil
	}
	tk.slot = -1
	if sh.slots.at(i).expireAt <= now {
		sh.remove(i)
		return nil
	}
	if recordlog.DecodeBlob(sh.value(i), &tk.k) != nil {
		// Only this package writes values; a corrupt one is a bug. Forget
		// it rather than decide on nonsense.
		sh.remove(i)
		return nil
	}
	tk.slot = i
	tk.k.ExpireAt = sh.slots.at(i).expireAt
	tk.k.Prune(now)
	tx.state[ki] = keyHeld
	return &tk.k
}

// Create implements keySource.
func (tx *batchTxn) Create(p *limiter.Plan, si int) *recordlog.KeyLogs {
	ki := tx.keyOf[tx.base+si]
	tk := tx.keys[ki]
	tk.slot, tk.touched = -1, false
	tk.k.Subs, tk.k.ExpireAt = tk.k.Subs[:0], 0
	tx.state[ki] = keyHeld
	return &tk.k
}

// reset empties tx for reuse, keeping its buffers.
func (tx *batchTxn) reset() {
	tx.memTxn.reset()
	clear(tx.secKeys) // let the plans' old buffers go
	tx.secKeys, tx.state = tx.secKeys[:0], tx.state[:0]
}
