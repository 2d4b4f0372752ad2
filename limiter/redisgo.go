package limiter

import (
	"bytes"
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
//
// Both go on the store's pipelined connection (pipeConn): the loop that
// made a batch waits for its read, sends its write and goes on to the next
// batch; the write's reply answers the batch's callers.

var commitScript = redis.NewScript(lua.Commit)

// goBatch is one batch decided in Go: its calls, its keys as read, what the
// decisions made of them, and its two requests. Batches are pooled with
// their buffers.
type goBatch struct {
	s       *Redis
	calls   []*call
	byName  map[string]*batchKey
	keys    []*batchKey
	free    []*batchKey
	names   []string    // the keys read, in MGET order
	checked []*batchKey // the keys the write checks, in KEYS order
	blob    []byte
	read    pipeReq
	write   pipeReq
	readIn  chan struct{} // room for one: the read's replies are in
	retried bool          // the write was sent again after NOSCRIPT
}

// batchKey is one key of a batch.
type batchKey struct {
	name   string
	old    []byte // the value read (in the batch's read buffer); nil when the key did not exist
	exists bool
	k      memKey
	// check: an admitted decision read the key, so the commit must find it
	// unchanged; write: a decision recorded in it.
	check, write bool
	touched      int64 // the now of the first decision that wrote it
	err          error // the value read is not a log: its decisions fail
}

var goBatches sync.Pool

// getGoBatch returns a pooled batch, or a new one.
func getGoBatch() *goBatch {
	if b, ok := goBatches.Get().(*goBatch); ok {
		return b
	}
	b := &goBatch{byName: map[string]*batchKey{}, readIn: make(chan struct{}, 1)}
	b.read.done = func(*pipeReq) { b.readIn <- struct{}{} }
	b.write.done = b.written
	return b
}

func (b *goBatch) reset() {
	clear(b.byName)
	for _, bk := range b.keys {
		*bk = batchKey{k: bk.k} // keep the decoding buffers
		b.free = append(b.free, bk)
	}
	b.keys, b.names, b.checked = b.keys[:0], b.names[:0], b.checked[:0]
	clear(b.calls)
	b.s, b.calls, b.retried = nil, b.calls[:0], false
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

// badKey returns the error of a key of p whose value is not a log.
func (b *goBatch) badKey(p *plan) error {
	for si := range p.sections {
		if bk := b.byName[string(p.key(&p.sections[si]))]; bk != nil && bk.err != nil {
			return bk.err
		}
	}
	return nil
}

// lookup implements keySource.
func (b *goBatch) lookup(p *plan, si int, now int64) *memKey {
	bk := b.byName[string(p.key(&p.sections[si]))]
	if bk == nil || !bk.exists {
		return nil
	}
	bk.k.prune(now)
	return &bk.k
}

// create implements keySource.
func (b *goBatch) create(p *plan, si int) *memKey {
	bk := b.byName[string(p.key(&p.sections[si]))]
	bk.exists = true
	bk.k.subs = bk.k.subs[:0]
	return &bk.k
}

// decideInGo decides calls in Go: it reads their keys, decides, and sends
// the write, whose reply (see written) answers the calls. It returns once
// the write is sent.
func (s *Redis) decideInGo(calls []*call) {
	b := getGoBatch()
	b.s, b.calls = s, append(b.calls, calls...)
	needTime := false
	for _, c := range calls {
		needTime = needTime || c.now == 0
		for si := range c.p.sections {
			b.add(c.p.key(&c.p.sections[si]))
		}
	}
	r := &b.read
	r.reset()
	if needTime {
		r.cmds = appendArray(r.cmds, 1)
		r.cmds = appendBulkString(r.cmds, "TIME")
		r.n++
	}
	if len(b.names) > 0 { // a request may have no checks
		r.cmds = appendArray(r.cmds, 1+len(b.names))
		r.cmds = appendBulkString(r.cmds, "MGET")
		for _, k := range b.names {
			r.cmds = appendBulkString(r.cmds, k)
		}
		r.n++
	}
	var now int64
	if r.n > 0 {
		s.pipe.send(r)
		<-b.readIn // bounded by the dial timeout and the request's deadline
		var err error
		if now, err = b.decode(needTime); err != nil {
			b.fail(err)
			return
		}
	}
	if !s.decideRun(b, now) {
		b.done()
		return
	}
	s.pipe.send(&b.write)
}

// decode reads the read's replies: the server's TIME (when asked for) and
// the values.
func (b *goBatch) decode(needTime bool) (int64, error) {
	r := &b.read
	if r.err != nil {
		return 0, r.err
	}
	var now int64
	i := 0
	if needTime {
		v := r.vals[0]
		if err := r.replyErr(v); err != nil {
			return 0, fmt.Errorf("TIME: %w", err)
		}
		if v.kind != '*' || v.n != 2 || r.vals[1].kind != '$' || r.vals[2].kind != '$' {
			return 0, fmt.Errorf("%w: TIME answered no time", ErrStore)
		}
		sec, err1 := strconv.ParseInt(string(r.str(r.vals[1])), 10, 64)
		usec, err2 := strconv.ParseInt(string(r.str(r.vals[2])), 10, 64)
		if err1 != nil || err2 != nil {
			return 0, fmt.Errorf("%w: TIME answered %q %q", ErrStore, r.str(r.vals[1]), r.str(r.vals[2]))
		}
		now = sec*1000 + usec/1000
		i = skip(r.vals, 0)
	}
	if len(b.names) == 0 {
		return now, nil
	}
	v := r.vals[i]
	if err := r.replyErr(v); err != nil {
		return 0, fmt.Errorf("MGET: %w", err)
	}
	if v.kind != '*' || int(v.n) != len(b.names) {
		return 0, fmt.Errorf("%w: MGET answered %d values for %d keys", ErrStore, v.n, len(b.names))
	}
	j := i + 1
	for _, bk := range b.keys {
		v := r.vals[j]
		j = skip(r.vals, j)
		switch v.kind {
		case 0:
			continue
		case '$':
		default:
			bk.err = fmt.Errorf("%w: MGET answered %q for %s", ErrStore, v.kind, bk.name)
			continue
		}
		bk.old, bk.exists = r.str(v), true
		if err := decodeBlob(bk.old, &bk.k); err != nil {
			// Only the decisions that read this key fail.
			bk.err = fmt.Errorf("%w: %s: %v", ErrStore, bk.name, err)
		}
	}
	return now, nil
}

// decideRun decides the batch's calls in order, as one step, and prepares
// the write. It reports whether there is something to write; when not,
// every call has its answer.
func (s *Redis) decideRun(b *goBatch, serverNow int64) bool {
	write := b.calls[0].op == "d"
	for _, c := range b.calls {
		now := c.now
		if now == 0 {
			now = serverNow
		}
		p := c.p
		if err := b.badKey(p); err != nil {
			c.err = err
			continue
		}
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
		return false
	}
	for _, bk := range b.keys {
		if bk.check {
			b.checked = append(b.checked, bk)
		}
	}
	if len(b.checked) == 0 {
		return false
	}
	if err := b.encodeWrite(false); err != nil {
		for _, c := range b.calls {
			if c.err == nil {
				c.err = err
			}
		}
		return false
	}
	if s.beforeCommit != nil {
		s.beforeCommit()
	}
	return true
}

// encodeWrite encodes commit.lua's run over the checked keys: each key's
// value as read, and its new value and TTL when a decision recorded in it.
// The script goes by its hash, or in full with eval (which also puts it
// back in the server's cache).
func (b *goBatch) encodeWrite(eval bool) error {
	w := &b.write
	w.reset()
	w.n = 1
	w.cmds = appendArray(w.cmds, 3+4*len(b.checked))
	if eval {
		w.cmds = appendBulkString(w.cmds, "EVAL")
		w.cmds = appendBulkString(w.cmds, lua.Commit)
	} else {
		w.cmds = appendBulkString(w.cmds, "EVALSHA")
		w.cmds = appendBulkString(w.cmds, commitScript.Hash())
	}
	w.cmds = appendBulkInt(w.cmds, int64(len(b.checked)))
	for _, bk := range b.checked {
		w.cmds = appendBulkString(w.cmds, bk.name)
	}
	for _, bk := range b.checked {
		w.cmds = appendBulk(w.cmds, bk.old)
		if !bk.write {
			w.cmds = appendBulk(w.cmds, nil)
			w.cmds = appendBulk(w.cmds, nil)
			continue
		}
		blob, err := encodeBlob(b.blob[:0], &bk.k)
		if err != nil {
			return err
		}
		b.blob = blob
		ttl := bk.k.expireAt - bk.touched
		if len(blob) == 0 || ttl <= 0 {
			w.cmds = appendBulk(w.cmds, nil)
			w.cmds = appendBulkString(w.cmds, "del")
		} else {
			w.cmds = appendBulk(w.cmds, blob)
			w.cmds = appendBulkInt(w.cmds, ttl)
		}
	}
	return nil
}

// written takes the write's reply, on the connection's reader: written, it
// answers the calls; a key changed since the read, or the script cache was
// emptied, it settles them on another goroutine (both take a round trip);
// failed, it fails them.
func (b *goBatch) written(r *pipeReq) {
	s := b.s
	err := r.err
	var changed int64
	if err == nil {
		switch v := r.vals[0]; v.kind {
		case ':':
			changed = v.n
		case '-':
			err = r.replyErr(v)
		default:
			err = fmt.Errorf("%w: commit answered %q", ErrStore, v.kind)
		}
	}
	switch {
	case err != nil && !b.retried && r.err == nil && bytes.HasPrefix(r.str(r.vals[0]), []byte("NOSCRIPT")):
		// The script cache was emptied (a restart, SCRIPT FLUSH, a new
		// master): nothing was written. Send the write again with the
		// script in full, off the reader: a send may wait on the socket.
		s.settling.Add(1)
		go s.resendWrite(b)
	case err != nil:
		b.fail(err)
	case changed == 0:
		b.done()
	default:
		s.conflicts.Add(1)
		if changed < 1 || int(changed) > len(b.checked) {
			b.fail(fmt.Errorf("%w: commit answered %d for %d keys", ErrStore, changed, len(b.checked)))
			return
		}
		s.hot.mark(b.checked[changed-1].name)
		s.settling.Add(1)
		go s.redecide(b)
	}
}

// resendWrite sends b's write again as EVAL.
func (s *Redis) resendWrite(b *goBatch) {
	defer s.settling.Done()
	b.retried = true
	if err := b.encodeWrite(true); err != nil {
		b.fail(err) // it encoded the first time: not reached
		return
	}
	s.pipe.send(&b.write)
}

// redecide decides b's calls again in freqcap.lua, after their write found
// a key changed: nothing of theirs was written.
func (s *Redis) redecide(b *goBatch) {
	defer s.settling.Done()
	for _, c := range b.calls {
		c.err, c.reply = nil, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
	defer cancel()
	s.runCalls(ctx, b.calls)
	b.done()
}

// fail fails every call of the batch and finishes it.
func (b *goBatch) fail(err error) {
	for _, c := range b.calls {
		c.err = err
	}
	b.done()
}

// done hands the calls their answers and releases the batch.
func (b *goBatch) done() {
	finish(b.calls)
	b.reset()
	goBatches.Put(b)
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
