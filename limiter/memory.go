package limiter

import (
	"context"
	"hash/maphash"
	"sync"
	"time"
)

// Memory is the embedded store: the same decisions as the Redis store, kept
// in this process. Keys are spread over shards, each with its own mutex; a
// decision locks the shards of its keys in index order, so it is atomic
// over all its rules and never deadlocks. Idle keys expire: lazily when
// touched, and by a sweeper that visits one shard at a time and a bounded
// number of keys per lock, so sweeping never stops the world.
//
// The zero value is not usable; call NewMemory. Memory is safe for
// concurrent use.
type Memory struct {
	now    func() time.Time
	prefix string
	seed   maphash.Seed
	shards [memShards]memShard
	stop   chan struct{}
	done   chan struct{}
	close  sync.Once
}

const (
	memShards = 256
	// sweepBatch is the most keys the sweeper looks at under one lock.
	sweepBatch = 512
	// keySlack keeps a key this long after its last record leaves every
	// window, as the Redis store's TTL does.
	keySlack = 60_000
)

type memShard struct {
	mu   sync.Mutex
	keys map[string]*memKey
}

// memKey holds the sub-logs of one key, as the Redis store's one string does.
type memKey struct {
	subs     []namedLog // a handful: a slice beats a map
	expireAt int64
}

type namedLog struct {
	id string
	subLog
}

// MemoryOptions configure NewMemory.
type MemoryOptions struct {
	// Now is the clock. Default: time.Now.
	Now func() time.Time
	// SweepInterval is how often the sweeper visits a shard. Default 10ms
	// (every shard about every 2.5 s); negative disables the sweeper.
	SweepInterval time.Duration
}

// NewMemory returns an empty memory store; Close stops its sweeper.
func NewMemory(opts MemoryOptions) *Memory {
	m := &Memory{now: opts.Now, seed: maphash.MakeSeed(), stop: make(chan struct{}), done: make(chan struct{})}
	if m.now == nil {
		m.now = time.Now
	}
	for i := range m.shards {
		m.shards[i].keys = make(map[string]*memKey)
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
func (m *Memory) Decide(ctx context.Context, req *Request) (*Decision, error) {
	return m.decide(req, true)
}

// Usage implements Store.
func (m *Memory) Usage(ctx context.Context, req *Request) (*Decision, error) {
	return m.decide(req, false)
}

func (m *Memory) clock(req *Request) time.Time {
	if !req.Now.IsZero() {
		return req.Now
	}
	return m.now()
}

func (m *Memory) decide(req *Request, record bool) (*Decision, error) {
	nowT := m.clock(req)
	p := getPlan()
	defer p.release()
	if err := p.build(m.prefix, req, nowT); err != nil {
		return nil, err
	}
	now := nowT.UnixMilli()
	m.lock(p)
	defer m.unlock(p)
	admitted, err := decideOn(m, p, now, record)
	if err != nil {
		return nil, err
	}
	return p.finish(req, now, admitted), nil
}

// Refund implements Store.
func (m *Memory) Refund(ctx context.Context, id string) (bool, error) {
	recs, err := decodeID(id)
	if err != nil {
		return false, nil
	}
	now := m.now().UnixMilli()
	p := getPlan()
	defer p.release()
	for _, r := range recs {
		p.sections = append(p.sections, section{k0: len(p.buf), k1: len(p.buf) + len(r.key)})
		p.buf = append(p.buf, r.key...)
	}
	m.lock(p)
	defer m.unlock(p)
	given := false
	for _, r := range recs {
		k := m.live(m.shard([]byte(r.key)), []byte(r.key), now)
		if k == nil {
			continue
		}
		l := k.find([]byte(r.sub))
		if l != nil && l.refund(r.t, r.c, r.grain, now) {
			given = true
			k.refreshExpiry()
		}
	}
	return given, nil
}

// Reset implements Store.
func (m *Memory) Reset(ctx context.Context, req *Request) error {
	now := m.clock(req)
	p := getPlan()
	defer p.release()
	if err := p.build(m.prefix, req, now); err != nil {
		return err
	}
	m.lock(p)
	defer m.unlock(p)
	for si := range p.sections {
		s := &p.sections[si]
		sh := m.shard(p.key(s))
		if k := m.live(sh, p.key(s), now.UnixMilli()); k != nil {
			if l := k.find(p.sub(s)); l != nil {
				l.forget()
				k.refreshExpiry()
			}
		}
	}
	return nil
}

// Close stops the sweeper.
func (m *Memory) Close() error {
	m.close.Do(func() { close(m.stop) })
	<-m.done
	return nil
}

// Len is the number of keys held, expired ones not yet swept included.
func (m *Memory) Len() int {
	n := 0
	for i := range m.shards {
		sh := &m.shards[i]
		sh.mu.Lock()
		n += len(sh.keys)
		sh.mu.Unlock()
	}
	return n
}

func (m *Memory) shard(key []byte) *memShard {
	return &m.shards[m.shardIndex(key)]
}

func (m *Memory) shardIndex(key []byte) int {
	return int(maphash.Bytes(m.seed, key) % memShards)
}

// lock takes the shard locks of every key of p in index order, so that
// decisions over several keys never deadlock.
func (m *Memory) lock(p *plan) {
	for si := range p.sections {
		i := m.shardIndex(p.key(&p.sections[si]))
		j := len(p.shards)
		for j > 0 && p.shards[j-1] > i {
			j--
		}
		if j > 0 && p.shards[j-1] == i {
			continue
		}
		p.shards = append(p.shards, 0)
		copy(p.shards[j+1:], p.shards[j:])
		p.shards[j] = i
	}
	for _, i := range p.shards {
		m.shards[i].mu.Lock()
	}
}

func (m *Memory) unlock(p *plan) {
	for _, i := range p.shards {
		m.shards[i].mu.Unlock()
	}
}

// live returns the key if it has not expired, its sub-logs pruned at now,
// or nil. The caller holds the shard lock.
func (m *Memory) live(sh *memShard, key []byte, now int64) *memKey {
	k := sh.keys[string(key)]
	if k == nil {
		return nil
	}
	if k.expireAt <= now {
		delete(sh.keys, string(key))
		return nil
	}
	k.prune(now)
	return k
}

// lookup implements keySource; the caller holds the shard lock.
func (m *Memory) lookup(key []byte, now int64) *memKey { return m.live(m.shard(key), key, now) }

// create implements keySource: a new empty key, stored. The caller holds the
// shard lock.
func (m *Memory) create(key []byte) *memKey {
	k := &memKey{}
	m.shard(key).keys[string(key)] = k
	return k
}

// find returns the sub-log with the id, or nil.
func (k *memKey) find(sub []byte) *subLog {
	for i := range k.subs {
		if k.subs[i].id == string(sub) {
			return &k.subs[i].subLog
		}
	}
	return nil
}

// sub returns the sub-log with the id, creating it.
func (k *memKey) sub(sub []byte) *subLog {
	if l := k.find(sub); l != nil {
		return l
	}
	k.subs = append(k.subs, namedLog{id: string(sub)})
	return &k.subs[len(k.subs)-1].subLog
}

// prune drops what no rule can need from every sub-log, and empty ones.
func (k *memKey) prune(now int64) {
	j := 0
	for i := range k.subs {
		k.subs[i].prune(now)
		if !k.subs[i].empty() {
			if i != j {
				k.subs[j] = k.subs[i]
			}
			j++
		}
	}
	clear(k.subs[j:])
	k.subs = k.subs[:j]
}

// refreshExpiry sets when the key may go: its last record's retention, plus
// the slack the Redis store's TTL has too.
func (k *memKey) refreshExpiry() {
	var exp int64
	for i := range k.subs {
		exp = max(exp, k.subs[i].expiry())
	}
	k.expireAt = exp + keySlack
}

func (m *Memory) sweep(interval time.Duration) {
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
		now := m.now().UnixMilli()
		sh := &m.shards[next]
		next = (next + 1) % memShards
		sh.mu.Lock()
		n := 0
		for key, k := range sh.keys {
			if k.expireAt <= now {
				delete(sh.keys, key)
			}
			if n++; n >= sweepBatch {
				break
			}
		}
		sh.mu.Unlock()
	}
}
