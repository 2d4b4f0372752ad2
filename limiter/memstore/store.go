package memstore

import (
	"bytes"
	"context"
	"hash/maphash"
	"sync"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"
)

// Store is the embedded store: the same decisions as the Redis store, kept
// in this process. Keys are spread over shards, each with its own mutex; a
// decision locks the shards of its keys in index order, so it is atomic
// over all its rules and never deadlocks. A key's value is kept encoded as
// the Redis store keeps it, in a shard's arena (see memShard), and decoded
// for the length of one decision. Idle keys expire: lazily when touched,
// and by a sweeper that visits one shard at a time and a bounded number of
// keys per lock, so sweeping never stops the world.
//
// The zero value is not usable; call New. A Store is safe for
// concurrent use.
type Store struct {
	now       func() time.Time
	seed      maphash.Seed
	shards    [memShards]memShard
	stop      chan struct{}
	done      chan struct{}
	closeOnce sync.Once
}

const (
	memShards = 256
	// sweepBatch is the most keys the sweeper looks at under one lock.
	sweepBatch = 512
	// maxSweepBatches is the most batches one visit of a shard sweeps:
	// up to 3.2 million expired keys a second over the shards at the
	// default interval.
	maxSweepBatches = 64
)

// Options configure New.
type Options struct {
	// Now is the clock. Default: time.Now.
	Now func() time.Time
	// SweepInterval is how often the sweeper visits a shard. Default 10ms
	// (every shard about every 2.5 s); negative disables the sweeper.
	SweepInterval time.Duration
}

// New returns an empty memory store; Close stops its sweeper.
func New(opts Options) *Store {
	m := &Store{now: opts.Now, seed: maphash.MakeSeed(), stop: make(chan struct{}), done: make(chan struct{})}
	if m.now == nil {
		m.now = time.Now
	}
	for i := range m.shards {
		m.shards[i].index = make(map[uint64]uint64)
	}
	interval := opts.SweepInterval
	if interval == 0 {
		interval = 10 * time.Millisecond
	}
	if interval > 0 {
		go m.sweep(interval)
	} else {
		close(m.done)
	}
	return m
}

// Decide implements Store.
func (m *Store) Decide(ctx context.Context, req *limiter.Request) (*limiter.Decision, error) {
	return m.decide(req, true)
}

// Usage implements Store.
func (m *Store) Usage(ctx context.Context, req *limiter.Request) (*limiter.Decision, error) {
	return m.decide(req, false)
}

func (m *Store) clock(req *limiter.Request) time.Time {
	if !req.Now.IsZero() {
		return req.Now
	}
	return m.now()
}

func (m *Store) decide(req *limiter.Request, record bool) (*limiter.Decision, error) {
	nowT := m.clock(req)
	w := m.work()
	defer w.release()
	p, tx := &w.plan, &w.tx
	if err := p.Build("", req, nowT); err != nil {
		return nil, err
	}
	now := nowT.UnixMilli()
	tx.lock(p)
	defer tx.unlock()
	admitted, err := limiter.DecideOn(tx, p, now, record)
	if err != nil {
		return nil, err
	}
	if admitted && record {
		for _, k := range p.KeyLogs {
			tx.touch(k)
		}
		if err := tx.commit(); err != nil {
			return nil, err
		}
	}
	return p.Finish(req, now, admitted), nil
}

// Refund implements Store.
func (m *Store) Refund(ctx context.Context, id string) (bool, error) {
	recs, err := recordlog.DecodeID(id)
	if err != nil {
		return false, nil
	}
	now := m.now().UnixMilli()
	w := m.work()
	defer w.release()
	p, tx := &w.plan, &w.tx
	for _, r := range recs {
		p.AddLog(r.Key, r.Sub)
	}
	tx.lock(p)
	defer tx.unlock()
	given := false
	for i, r := range recs {
		s := &p.Sections[i]
		k := tx.Lookup(p, i, now)
		if k == nil {
			continue
		}
		if k.Refund(p.Sub(s), r.T, r.C, r.Grain, now) {
			given = true
			k.RefreshExpiry()
			tx.touch(k)
		}
	}
	if err := tx.commit(); err != nil {
		return false, err
	}
	return given, nil
}

// Reset implements Store.
func (m *Store) Reset(ctx context.Context, req *limiter.Request) error {
	return m.locked(req, func(p *limiter.Plan, tx *memTxn, now int64) error {
		for si := range p.Sections {
			s := &p.Sections[si]
			if k := tx.Lookup(p, si, now); k != nil {
				forgot := false
				if req.Keep > 0 {
					forgot = k.ForgetBefore(p.Sub(s), now-req.Keep.Milliseconds())
				} else {
					forgot = k.Forget(p.Sub(s))
				}
				if forgot {
					k.RefreshExpiry()
					tx.touch(k)
				}
			}
		}
		return tx.commit()
	})
}

// locked runs fn over req's plan with its keys' shards locked, at req's
// time (the store's clock when zero); what fn changes, it commits itself.
func (m *Store) locked(req *limiter.Request, fn func(p *limiter.Plan, tx *memTxn, now int64) error) error {
	now := m.clock(req)
	w := m.work()
	defer w.release()
	p, tx := &w.plan, &w.tx
	if err := p.Build("", req, now); err != nil {
		return err
	}
	tx.lock(p)
	defer tx.unlock()
	return fn(p, tx, now.UnixMilli())
}

// Close stops the sweeper.
func (m *Store) Close() error {
	m.closeOnce.Do(func() { close(m.stop) })
	<-m.done
	return nil
}

// Len is the number of keys held, expired ones not yet swept included.
func (m *Store) Len() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += sh.live
		sh.mu.Unlock()
	}
	return n
}

func (m *Store) hash(key []byte) uint64 { return maphash.Bytes(m.seed, key) }

// memWork is one operation's scratch space on the memory store: its plan
// and its transaction, pooled together so that a decision allocates neither
// once the pool is warm.
type memWork struct {
	plan limiter.Plan
	tx   memTxn
}

var memWorks = sync.Pool{New: func() any { return new(memWork) }}

// work returns empty scratch space on m.
func (m *Store) work() *memWork {
	w := memWorks.Get().(*memWork)
	w.tx.m = m
	return w
}

// release returns w to the pool; w must not be used afterwards.
func (w *memWork) release() {
	w.tx.reset()
	if w.plan.Reset() {
		memWorks.Put(w)
	}
}

// memTxn is one decision's (or refund's, or reset's) view of the keys it
// reads: each decoded once, written back by commit when touched, under the
// shard locks that lock takes.
type memTxn struct {
	m      *Store
	keys   []*txnKey // [:n] in use; the rest kept for their buffers
	n      int
	buf    []byte
	shards []int    // the shards locked, ascending
	hashes []uint64 // each section's key hashed
	// base is where the plan being decided starts in hashes (a batch,
	// see batchTxn, locks many plans at once).
	base int
	// byHash finds the keys of a transaction that holds many (a request
	// over many keys; a batch reaches its keys by index, see batchTxn) by
	// their hash, so that finding one is not a scan; nil while there are
	// few. A hash two keys share (never seen with 64 bits) names the
	// first, and the other is found by a scan.
	byHash map[uint64]int
}

// manyKeys is the number of keys past which a transaction indexes them.
const manyKeys = 16

// lock hashes the key of every section of the plans (into tx.hashes, in
// order) and takes their shard locks in index order, so that decisions over
// several keys never deadlock. Before deciding plans[i], the caller sets
// tx.base to the number of sections of the plans before it.
func (tx *memTxn) lock(plans ...*limiter.Plan) {
	m := tx.m
	for _, p := range plans {
		for si := range p.Sections {
			h := m.hash(p.Key(&p.Sections[si]))
			tx.hashes = append(tx.hashes, h)
			i := int(h % memShards)
			j := len(tx.shards)
			for j > 0 && tx.shards[j-1] > i {
				j--
			}
			if j > 0 && tx.shards[j-1] == i {
				continue
			}
			tx.shards = append(tx.shards, 0)
			copy(tx.shards[j+1:], tx.shards[j:])
			tx.shards[j] = i
		}
	}
	for _, i := range tx.shards {
		m.shards[i].mu.Lock()
	}
}

func (tx *memTxn) unlock() {
	for _, i := range tx.shards {
		tx.m.shards[i].mu.Unlock()
	}
}

type txnKey struct {
	sh      *memShard
	hash    uint64
	slot    int32 // -1 for a key not stored yet
	key     []byte
	k       recordlog.KeyLogs
	touched bool
	// off, end: the encoded value in memTxn.buf, once commit encoded it
	off, end int
}

// reset empties tx for reuse, keeping its buffers.
func (tx *memTxn) reset() {
	for _, tk := range tx.keys[:tx.n] {
		tk.key = nil
		subs := tk.k.Subs[:cap(tk.k.Subs)]
		for i := range subs {
			subs[i].Id = nil // let old arenas go
		}
	}
	tx.m, tx.n, tx.base, tx.byHash = nil, 0, 0, nil
	tx.shards, tx.hashes = tx.shards[:0], tx.hashes[:0]
}

// next returns a new key of the transaction, empty, with the buffers of
// one an earlier transaction used.
func (tx *memTxn) next() *txnKey {
	if tx.n == len(tx.keys) {
		tx.keys = append(tx.keys, new(txnKey))
	}
	tk := tx.keys[tx.n]
	tx.n++
	tk.k.Subs, tk.k.ExpireAt = tk.k.Subs[:0], 0
	return tk
}

func (tx *memTxn) add(sh *memShard, hash uint64, slot int32, key []byte) *txnKey {
	tk := tx.next()
	tk.sh, tk.hash, tk.slot, tk.key, tk.touched = sh, hash, slot, key, false
	switch {
	case tx.byHash != nil:
		if _, taken := tx.byHash[hash]; !taken {
			tx.byHash[hash] = tx.n - 1
		}
	case tx.n > manyKeys:
		tx.byHash = make(map[uint64]int, 2*tx.n)
		for i, k := range tx.keys[:tx.n] {
			if _, taken := tx.byHash[k.hash]; !taken {
				tx.byHash[k.hash] = i
			}
		}
	}
	return tk
}

// Lookup implements keySource.
func (tx *memTxn) Lookup(p *limiter.Plan, si int, now int64) *recordlog.KeyLogs {
	key := p.Key(&p.Sections[si])
	if tk := tx.find(key, tx.hashes[tx.base+si]); tk != nil {
		tk.k.Prune(now)
		return &tk.k
	}
	h := tx.hashes[tx.base+si]
	sh := &tx.m.shards[h%memShards]
	i := sh.find(h, key)
	if i < 0 {
		return nil
	}
	if sh.slots.at(i).expireAt <= now {
		sh.remove(i)
		return nil
	}
	tk := tx.add(sh, h, i, key)
	if recordlog.DecodeBlob(sh.value(i), &tk.k) != nil {
		// Only this package writes values; a corrupt one is a bug. Forget
		// it rather than decide on nonsense.
		sh.remove(i)
		tx.n--
		if tx.byHash != nil && tx.byHash[h] == tx.n {
			delete(tx.byHash, h)
		}
		return nil
	}
	tk.k.ExpireAt = sh.slots.at(i).expireAt
	tk.k.Prune(now)
	return &tk.k
}

// Create implements keySource.
func (tx *memTxn) Create(p *limiter.Plan, si int) *recordlog.KeyLogs {
	h := tx.hashes[tx.base+si]
	return &tx.add(&tx.m.shards[h%memShards], h, -1, p.Key(&p.Sections[si])).k
}

// find returns the key of the transaction named key, or nil.
func (tx *memTxn) find(key []byte, hash uint64) *txnKey {
	if tx.byHash != nil {
		i, ok := tx.byHash[hash]
		if !ok {
			return nil
		}
		if tk := tx.keys[i]; bytes.Equal(tk.key, key) {
			return tk
		}
		// Another key with this hash came first: scan.
	}
	for _, tk := range tx.keys[:tx.n] {
		if bytes.Equal(tk.key, key) {
			return tk
		}
	}
	return nil
}

// touch marks k to be written back.
func (tx *memTxn) touch(k *recordlog.KeyLogs) {
	for _, tk := range tx.keys[:tx.n] {
		if &tk.k == k {
			tk.touched = true
		}
	}
}

// commit writes back the touched keys: all of them, or, when one cannot be
// encoded (more records than a log can hold; CheckLogs refuses configs that
// could get there), none, with an error.
func (tx *memTxn) commit() error {
	buf := tx.buf[:0]
	for _, tk := range tx.keys[:tx.n] {
		if !tk.touched {
			continue
		}
		// Encode apart first: the ids being encoded may lie in the arena.
		start := len(buf)
		var err error
		if buf, err = recordlog.EncodeBlob(buf, &tk.k); err != nil {
			tx.buf = buf
			return err
		}
		tk.off, tk.end = start, len(buf)
	}
	tx.buf = buf
	for _, tk := range tx.keys[:tx.n] {
		switch {
		case !tk.touched:
		case tk.end == tk.off: // nothing left
			if tk.slot >= 0 {
				tk.sh.remove(tk.slot)
			}
		default:
			tk.slot = tk.sh.put(tk.slot, tk.hash, tk.key, buf[tk.off:tk.end], tk.k.ExpireAt)
		}
	}
	return nil
}

func (m *Store) sweep(interval time.Duration) {
	defer close(m.done)
	tick := time.NewTicker(interval)
	defer tick.Stop()
	next := 0
	for {
		select {
		case <-m.stop:
			return
		case <-tick.C:
		}
		sweepShard(&m.shards[next], m.now().UnixMilli())
		next = (next + 1) % memShards
	}
}

// sweepShard sweeps one shard at now: a batch of sweepBatch slots, and
// more, the lock released between them, while a batch finds a quarter of
// its slots expired, up to maxSweepBatches. One batch a visit kept up with
// about 51,000 expiring keys a second; a sender spraying new recipients
// faster grew the store until long after they expired.
func sweepShard(sh *memShard, now int64) {
	for range maxSweepBatches {
		sh.mu.Lock()
		removed := sh.sweep(now, sweepBatch)
		sh.mu.Unlock()
		if removed < sweepBatch/4 {
			return
		}
	}
}
