package limiter

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/lua"
)

// This file is the Redis store's fast path, off a cluster: a batch of
// decisions is made in Go between one read (TIME and MGET) and one
// compare-and-set write (lua/commit.lua), with the algorithm the memory
// store runs. Redis then only copies bytes: about a third of the CPU that
// deciding in freqcap.lua costs it (see the README's Performance section).
// When the write finds a key changed since the read, nothing was written and
// the batch is decided again in freqcap.lua, which cannot conflict.

var commitScript = redis.NewScript(lua.Commit)

// goBatch is the keys of one batch, as read, and what the decisions made of
// them. Batches are pooled with their buffers.
type goBatch struct {
	byName map[string]*batchKey
	keys   []*batchKey
	free   []*batchKey
	names  []string
	args   []any
	blob   []byte
}

// batchKey is one key of a batch.
type batchKey struct {
	name   string
	old    string // the value read; "" when the key did not exist
	exists bool
	k      memKey
	// check: an admitted decision read the key, so the commit must find it
	// unchanged; write: a decision recorded in it.
	check, write bool
	touched      int64 // the now of the first decision that wrote it
}

var goBatches = sync.Pool{New: func() any { return &goBatch{byName: map[string]*batchKey{}} }}

func (b *goBatch) reset() {
	clear(b.byName)
	for _, bk := range b.keys {
		bk.name, bk.old, bk.exists, bk.check, bk.write, bk.touched = "", "", false, false, false, 0
		b.free = append(b.free, bk)
	}
	b.keys, b.names = b.keys[:0], b.names[:0]
	clear(b.args)
	b.args = b.args[:0]
}

// add notes a key the batch reads.
func (b *goBatch) add(key []byte) {
	if _, ok := b.byName[string(key)]; ok {
		return
	}
	var bk *batchKey
	if n := len(b.free); n > 0 {
		bk, b.free = b.free[n-1], b.free[:n-1]
	} else {
		bk = new(batchKey)
	}
	bk.name = string(key)
	b.byName[bk.name] = bk
	b.keys = append(b.keys, bk)
	b.names = append(b.names, bk.name)
}

// lookup implements keySource.
func (b *goBatch) lookup(key []byte, now int64) *memKey {
	bk := b.byName[string(key)]
	if bk == nil || !bk.exists {
		return nil
	}
	bk.k.prune(now)
	return &bk.k
}

// create implements keySource.
func (b *goBatch) create(key []byte) *memKey {
	bk := b.byName[string(key)]
	bk.exists = true
	bk.k.subs = bk.k.subs[:0]
	return &bk.k
}

// decideInGo decides a batch of calls (one op, every section of each plan)
// in Go. It reports false, having written nothing, when the commit found a
// key changed: the caller then decides the batch in the script. Otherwise
// every call has its reply or its error.
func (s *Redis) decideInGo(ctx context.Context, calls []*call) bool {
	b := goBatches.Get().(*goBatch)
	defer func() {
		b.reset()
		goBatches.Put(b)
	}()
	needTime := false
	for _, c := range calls {
		needTime = needTime || c.now == 0
		for si := range c.p.sections {
			b.add(c.p.key(&c.p.sections[si]))
		}
	}
	serverNow, err := s.read(ctx, b, needTime)
	if err != nil {
		for _, c := range calls {
			c.err = err
		}
		return true
	}
	write := calls[0].op == "d"
	for _, c := range calls {
		now := c.now
		if now == 0 {
			now = serverNow
		}
		p := c.p
		p.raw = p.raw[:0]
		admitted, err := decideOn(b, p, now, write)
		if err != nil {
			c.err = err
			continue
		}
		c.at, c.reply = now, replyOf(p, admitted, c.reply[:0])
		if !admitted || !write {
			continue
		}
		for si := range p.sections {
			sec := &p.sections[si]
			bk := b.byName[string(p.key(sec))]
			bk.check = true
			if sec.recorded > 0 && !bk.write {
				bk.write, bk.touched = true, now
			}
		}
	}
	if !write {
		return true
	}
	if s.beforeCommit != nil {
		s.beforeCommit()
	}
	committed, err := s.commit(ctx, b)
	if err != nil {
		for _, c := range calls {
			c.err = err
		}
		return true
	}
	return committed
}

// read fetches the batch's keys and, when needed, the server's TIME, in one
// round trip, and decodes the values.
func (s *Redis) read(ctx context.Context, b *goBatch, needTime bool) (int64, error) {
	var tm *redis.TimeCmd
	var mg *redis.SliceCmd
	_, err := s.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		if needTime {
			tm = pipe.Time(ctx)
		}
		mg = pipe.MGet(ctx, b.names...)
		return nil
	})
	if err != nil {
		return 0, classify(err)
	}
	var now int64
	if needTime {
		now = tm.Val().UnixMilli()
	}
	for i, v := range mg.Val() {
		bk := b.keys[i]
		if v == nil {
			continue
		}
		old, ok := v.(string)
		if !ok {
			return 0, fmt.Errorf("%w: MGET answered %T for %s", ErrStore, v, bk.name)
		}
		bk.old, bk.exists = old, true
		if err := decodeBlob([]byte(old), &bk.k); err != nil {
			return 0, fmt.Errorf("%w: %s: %v", ErrStore, bk.name, err)
		}
	}
	return now, nil
}

// commit writes what the batch recorded, if every key an admitted decision
// read is unchanged. It reports whether it wrote.
func (s *Redis) commit(ctx context.Context, b *goBatch) (bool, error) {
	b.names = b.names[:0]
	for _, bk := range b.keys {
		if !bk.check {
			continue
		}
		b.names = append(b.names, bk.name)
		if !bk.write {
			b.args = append(b.args, bk.old, "", "")
			continue
		}
		blob, err := encodeBlob(b.blob[:0], &bk.k)
		if err != nil {
			return false, err
		}
		b.blob = blob
		ttl := bk.k.expireAt - bk.touched
		if len(blob) == 0 || ttl <= 0 {
			b.args = append(b.args, bk.old, "", "del")
		} else {
			b.args = append(b.args, bk.old, string(blob), strconv.FormatInt(ttl, 10))
		}
	}
	if len(b.names) == 0 {
		return true, nil
	}
	changed, err := commitScript.Run(ctx, s.client, b.names, b.args...).Int64()
	if err != nil {
		return false, classify(err)
	}
	return changed == 0, nil
}

// replyOf appends a decision's answer in the script's reply layout (see
// freqcap.lua): admitted, each section's record time, then per rule used,
// reset and retry.
func replyOf(p *plan, admitted bool, dst []int64) []int64 {
	a := int64(0)
	if admitted {
		a = 1
	}
	dst = append(dst, a)
	for si := range p.sections {
		dst = append(dst, p.sections[si].recorded)
	}
	for _, r := range p.raw {
		retry := r.retry
		if r.ok {
			retry = 0
		}
		dst = append(dst, r.used, r.reset, retry)
	}
	return dst
}
