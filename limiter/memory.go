package limiter

import (
	"context"
	"hash/maphash"
	"sort"
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
	subs     map[string]*subLog
	expireAt int64
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
	p, err := buildPlan(m.prefix, req, nowT)
	if err != nil {
		return nil, err
	}
	now := nowT.UnixMilli()
	unlock := m.lock(p)
	defer unlock()

	logs := make([]*subLog, len(p.sections))
	raw := make([]rawResult, 0, len(req.Checks))
	admitted := true
	for si := range p.sections {
		s := &p.sections[si]
		logs[si] = m.subLog(s.key, s.sub, now, false)
		for ri := range s.rules {
			r, err := logs[si].evaluate(&s.rules[ri], s.cost, now)
			if err != nil {
				return nil, err
			}
			admitted = admitted && r.ok
			raw = append(raw, r)
		}
	}
	if !admitted || !record {
		return p.finish(req, now, raw, admitted), nil
	}
	var recs []recorded
	k := 0
	for si := range p.sections {
		s := &p.sections[si]
		l := m.subLog(s.key, s.sub, now, true)
		l.retention = s.retention
		if s.cost > 0 {
			t := l.record(now, s.cost, s.grain)
			recs = append(recs, recorded{key: s.key, sub: s.sub, grain: s.grain, t: t, c: s.cost})
		}
		for ri := range s.rules {
			l.afterRecord(&s.rules[ri], &raw[k], s.cost, now)
			k++
		}
		m.touch(s.key, now)
	}
	d := p.finish(req, now, raw, true)
	d.ID = encodeID(recs)
	return d, nil
}

// Refund implements Store.
func (m *Memory) Refund(ctx context.Context, id string) (bool, error) {
	recs, err := decodeID(id)
	if err != nil {
		return false, nil
	}
	now := m.now().UnixMilli()
	p := &plan{}
	for _, r := range recs {
		p.sections = append(p.sections, section{key: r.key})
	}
	unlock := m.lock(p)
	defer unlock()
	any := false
	for _, r := range recs {
		k := m.getKey(r.key, now)
		if k == nil || k.subs[r.sub] == nil {
			continue
		}
		if k.subs[r.sub].refund(r.t, r.c, r.grain) {
			any = true
		}
		m.touch(r.key, now)
	}
	return any, nil
}

// Reset implements Store.
func (m *Memory) Reset(ctx context.Context, req *Request) error {
	now := m.clock(req)
	p, err := buildPlan(m.prefix, req, now)
	if err != nil {
		return err
	}
	unlock := m.lock(p)
	defer unlock()
	for _, s := range p.sections {
		if k := m.getKey(s.key, now.UnixMilli()); k != nil {
			delete(k.subs, s.sub)
			m.touch(s.key, now.UnixMilli())
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

func (m *Memory) shard(key string) *memShard {
	return &m.shards[maphash.String(m.seed, key)%memShards]
}

// lock takes the shard locks of every key of p in index order and returns
// the function that releases them.
func (m *Memory) lock(p *plan) func() {
	if len(p.sections) == 1 {
		sh := m.shard(p.sections[0].key)
		sh.mu.Lock()
		return sh.mu.Unlock
	}
	idx := make([]int, 0, len(p.sections))
	for _, s := range p.sections {
		i := int(maphash.String(m.seed, s.key) % memShards)
		dup := false
		for _, j := range idx {
			dup = dup || j == i
		}
		if !dup {
			idx = append(idx, i)
		}
	}
	sort.Ints(idx)
	for _, i := range idx {
		m.shards[i].mu.Lock()
	}
	return func() {
		for _, i := range idx {
			m.shards[i].mu.Unlock()
		}
	}
}

// getKey returns the live key, pruned at now, or nil. The caller holds its
// shard lock.
func (m *Memory) getKey(key string, now int64) *memKey {
	sh := m.shard(key)
	k := sh.keys[key]
	if k == nil {
		return nil
	}
	if k.expireAt <= now {
		delete(sh.keys, key)
		return nil
	}
	for id, l := range k.subs {
		l.prune(now)
		if l.empty() {
			delete(k.subs, id)
		}
	}
	return k
}

// subLog returns the sub-log of key; with create, it makes the key and the
// sub-log when missing, else it answers an empty log. The caller holds the
// shard lock.
func (m *Memory) subLog(key, sub string, now int64, create bool) *subLog {
	k := m.getKey(key, now)
	if k == nil {
		if !create {
			return &subLog{}
		}
		k = &memKey{subs: make(map[string]*subLog, 1), expireAt: now + keySlack}
		m.shard(key).keys[key] = k
	}
	l := k.subs[sub]
	if l == nil {
		if !create {
			return &subLog{}
		}
		l = &subLog{}
		k.subs[sub] = l
	}
	return l
}

// touch recomputes a key's expiry after a change, dropping it when empty.
func (m *Memory) touch(key string, now int64) {
	sh := m.shard(key)
	k := sh.keys[key]
	if k == nil {
		return
	}
	var exp int64
	for id, l := range k.subs {
		if l.empty() {
			delete(k.subs, id)
			continue
		}
		exp = max(exp, l.expiry())
	}
	if len(k.subs) == 0 {
		delete(sh.keys, key)
		return
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
