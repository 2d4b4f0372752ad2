package redisstore

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"unsafe"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"
	"github.com/freqcap/caddy-freqcap/lua"
)

// This file is the Redis store's fast path, off a cluster: a batch of
// decisions is made in Go between one read (TIME and MGET) and one
// compare-and-set write (lua/commit.lua), with the algorithm the memory
// store runs. Redis then only copies bytes: about a third of the CPU that
// deciding in freqcap.lua costs it (see docs/performance.md).
// When the write finds a key changed since the read, nothing was written and
// the batch is decided again in freqcap.lua, which cannot conflict.

var commitScript = redis.NewScript(lua.Commit)

// The write of one key in commit.lua's ARGV, besides a TTL in ms; the
// script names them WRITE_CHECK and WRITE_DELETE.
const (
	writeCheck  = ""    // only check that the key is unchanged
	writeDelete = "del" // delete the key: its logs are empty
)

// readBatch is the keys of one batch, as read, and what the decisions made of
// them. Batches are pooled with their buffers.
type readBatch struct {
	byName map[string]*batchKey
	keys   []*batchKey
	free   []*batchKey
	// args are the read's MGET: "mget", then each key's name by argRef
	// (the keys keep the names until the batch is done), and getArgs a
	// GET's of each on a cluster's master, where an MGET cannot span
	// slots; both are kept from batch to batch, so a read boxes nothing.
	args, getArgs []any
}

// batchKey is one key of a batch.
type batchKey struct {
	name   string
	old    string // the value read; "" when the key did not exist
	exists bool
	k      recordlog.KeyLogs
	// check: an admitted decision read the key, so the commit must find it
	// unchanged; write: a decision recorded in it.
	check, write bool
	touched      int64 // the now of the first decision that wrote it
	// value and ttl are the write's new value and its TTL in ms, as
	// text in valueBuf and ttlBuf, which the key keeps from batch to
	// batch: the write passes them by argRef.
	value, ttl       string
	valueBuf, ttlBuf []byte
	err              error // the value read is not a log: its decisions fail
	// reader is 1 + the index of the first call that read the key (0:
	// none yet), for componentsOf.
	reader int32
}

var readBatches = sync.Pool{New: func() any { return &readBatch{byName: map[string]*batchKey{}} }}

func (b *readBatch) reset() {
	clear(b.byName)
	for _, bk := range b.keys {
		*bk = batchKey{k: bk.k, valueBuf: bk.valueBuf, ttlBuf: bk.ttlBuf} // keep the buffers
		b.free = append(b.free, bk)
	}
	b.keys, b.args = b.keys[:0], b.args[:0]
}

// gets queues a GET of each key on pipe.
func (b *readBatch) gets(ctx context.Context, pipe redis.Pipeliner) []*redis.StringCmd {
	b.getArgs = b.getArgs[:0]
	for _, name := range b.args[1:] {
		b.getArgs = append(b.getArgs, "get", name)
	}
	gets := make([]*redis.StringCmd, len(b.keys))
	for i := range gets {
		gets[i] = redis.NewStringCmd(ctx, b.getArgs[2*i:2*i+2:2*i+2]...)
		_ = pipe.Process(ctx, gets[i]) // queued: its error comes with Exec's
	}
	return gets
}

// add notes a key the batch reads.
func (b *readBatch) add(key []byte) {
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
	if len(b.args) == 0 {
		b.args = append(b.args, "mget")
	}
	b.args = append(b.args, argRef{&bk.name})
}

// badKey returns the error of a key of p whose value is not a log.
func (b *readBatch) badKey(p *limiter.Plan) error {
	for si := range p.Sections {
		if bk := b.byName[string(p.Key(&p.Sections[si]))]; bk != nil && bk.err != nil {
			return bk.err
		}
	}
	return nil
}

// Lookup implements keySource.
func (b *readBatch) Lookup(p *limiter.Plan, si int, now int64) *recordlog.KeyLogs {
	bk := b.byName[string(p.Key(&p.Sections[si]))]
	if bk == nil || !bk.exists {
		return nil
	}
	bk.k.Prune(now)
	return &bk.k
}

// Create implements keySource.
func (b *readBatch) Create(p *limiter.Plan, si int) *recordlog.KeyLogs {
	bk := b.byName[string(p.Key(&p.Sections[si]))]
	bk.exists = true
	bk.k.Subs = bk.k.Subs[:0]
	return &bk.k
}

// decidedInGo is a batch being decided in Go: its calls, their keys, and the
// deadline of the whole (its calls wait as long).
type decidedInGo struct {
	calls  []*call
	b      *readBatch
	ctx    context.Context
	cancel context.CancelFunc
	// perComponent: the calls are the entries of a batch send under
	// BatchEach, so each group of entries that share no key with the
	// others (a component) may be written without the rest: commit.lua
	// writes every component whose keys are unchanged, and only the
	// entries of the others are decided again, in the script.
	perComponent bool
	// after the read:
	names     []string // the keys the write checks or writes
	args      []any
	component []int32 // with perComponent, each call's
	keyComp   []int32 // with perComponent, each of names's
	// writeNative: the node takes SET … IFEQ, so the keys alone in their
	// component go in native, not in names (nativewrite.go).
	writeNative bool
	native      []nativeKey
	// lane made the read: its node's write path, and on a cluster
	// (lane.cluster) what commit.lua would write goes to commit_node.lua
	// on that master (masterwrite.go), again there after NOSCRIPT.
	lane *lane
	// sentAgain: the commit run met NOSCRIPT and went again, with EVAL,
	// after its round trip.
	sentAgain bool
}

// roundTrip makes one round trip off a cluster, on the store's one lane
// (see lane.roundTrip).
func (s *Store) roundTrip(held *decidedInGo, calls []*call, perComponent bool) *decidedInGo {
	return s.main.roundTrip(held, calls, perComponent)
}

// roundTrip makes one round trip to the lane's server: the write of held
// (a batch decided in the last round; nil for none) and the read of calls
// (nil for none). It finishes held, decides calls, and returns them as the
// next held batch when they have something to write. perComponent is for
// calls (see decidedInGo); on a cluster calls are always written by
// component, being independent decisions.
func (l *lane) roundTrip(held *decidedInGo, calls []*call, perComponent bool) *decidedInGo {
	s := l.s
	if held == nil && calls == nil {
		return nil
	}
	var next *decidedInGo
	needTime := false
	if calls != nil {
		next = &decidedInGo{calls: calls, b: readBatches.Get().(*readBatch), perComponent: perComponent || l.cluster, lane: l}
		next.writeNative = calls[0].op != opPeek && l.native()
		next.ctx, next.cancel = context.WithTimeout(context.Background(), s.opts.Timeout)
		for _, c := range calls {
			needTime = needTime || c.now == 0
			for si := range c.p.Sections {
				next.b.add(c.p.Key(&c.p.Sections[si]))
			}
		}
	}
	// The round has the newer deadline: held's callers may have given up
	// already, but its write is still owed (see do).
	ctx := context.Context(nil)
	if next != nil {
		ctx = next.ctx
	} else {
		ctx = held.ctx
	}
	var ec *redis.Cmd
	var tm *redis.TimeCmd
	var mg *redis.SliceCmd
	var gets []*redis.StringCmd
	var perr error
	for {
		_, perr = l.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
			if held != nil {
				ec = queueCommit(ctx, pipe, held)
				queueNative(ctx, pipe, held, l.cluster)
			}
			if next != nil {
				if needTime {
					tm = pipe.Time(ctx)
				}
				switch {
				case len(next.b.keys) == 0: // a request may have no checks
				case l.cluster:
					gets = next.b.gets(ctx, pipe)
				default:
					mg = redis.NewSliceCmd(ctx, next.b.args...)
					_ = pipe.Process(ctx, mg) // queued: its error comes with Exec's

				}
			}
			return nil
		})
		if held == nil {
			break
		}
		late := s.finishWrite(held, ec, perr)
		held = nil
		if !late || next == nil {
			break
		}
		// held wrote after this round trip (its script loaded again, or
		// its refused decisions decided again in the script), so next's
		// read may predate those writes, and its own write would find
		// their keys changed: read again.
		ec, tm, mg, gets = nil, nil, nil, nil
	}
	if next == nil {
		return nil
	}
	var now int64
	var err error
	if l.cluster {
		now, err = l.decodeGets(next, tm, gets, perr)
	} else {
		now, err = s.decode(next, tm, mg, perr)
	}
	if err != nil {
		next.fail(err)
		return nil
	}
	if len(next.calls) == 0 {
		next.done()
		return nil
	}
	if !s.decideInGo(next, now) {
		next.done()
		return nil
	}
	return next
}

// decode reads the round's answers for run: the server's TIME (when asked
// for) and the values.
func (s *Store) decode(run *decidedInGo, tm *redis.TimeCmd, mg *redis.SliceCmd, perr error) (int64, error) {
	var now int64
	if tm != nil {
		if err := answered(tm, !tm.Val().IsZero(), perr); err != nil {
			return 0, err
		}
		now = tm.Val().UnixMilli()
	}
	if mg == nil {
		return now, nil
	}
	if err := answered(mg, len(mg.Val()) == len(run.b.keys), perr); err != nil {
		return 0, err
	}
	for i, v := range mg.Val() {
		run.b.keys[i].load(v)
	}
	return now, nil
}

// load takes the key's value as read (nil: no key).
func (bk *batchKey) load(v any) {
	if v == nil {
		return
	}
	old, ok := v.(string)
	if !ok {
		bk.err = fmt.Errorf("%w: the read answered %T for %s", limiter.ErrStore, v, bk.name)
		return
	}
	bk.old, bk.exists = old, true
	// Read in place: the value is never written to (its logs' ids point
	// into it, and writes encode into a buffer of their own), and a copy
	// would cost an allocation a key.
	if err := recordlog.DecodeBlob(unsafe.Slice(unsafe.StringData(old), len(old)), &bk.k); err != nil {
		// Only the decisions that read this key fail.
		bk.err = fmt.Errorf("%w: %s: %v", limiter.ErrStore, bk.name, err)
	}
}

// decideInGo decides the run's calls in order, as one step, and prepares
// the write. It reports whether there is something to write; when not,
// every call has its answer.
func (s *Store) decideInGo(run *decidedInGo, serverNow int64) bool {
	b := run.b
	write := run.calls[0].op != opPeek
	for _, c := range run.calls {
		now := c.now
		if now == 0 {
			now = serverNow
		}
		p := c.p
		if err := b.badKey(p); err != nil {
			c.err = err
			continue
		}
		p.Raw = p.Raw[:0]
		admitted, err := limiter.DecideOn(b, p, now, write)
		if err != nil {
			c.err = err
			continue
		}
		c.at, c.reply = now, replyOf(p, admitted, c.reply[:0])
		if !admitted || !write {
			continue
		}
		for si := range p.Sections {
			sec := &p.Sections[si]
			bk := b.byName[string(p.Key(sec))]
			bk.check = true
			if sec.Recorded > 0 && !bk.write {
				bk.write, bk.touched = true, now
			}
		}
	}
	if !write || (run.calls[0].op == opDecideAll && !allAdmitted(run.calls)) {
		return false
	}
	for _, bk := range b.keys {
		if !bk.check {
			continue
		}
		run.names = append(run.names, bk.name)
		if !bk.write {
			run.args = append(run.args, argRef{&bk.old}, "", writeCheck)
			continue
		}
		blob, err := recordlog.EncodeBlob(bk.valueBuf[:0], &bk.k)
		if err != nil {
			run.names, run.args = nil, nil
			for _, c := range run.calls {
				if c.err == nil {
					c.err = err
				}
			}
			return false
		}
		bk.valueBuf = blob
		ttl := bk.k.ExpireAt - bk.touched
		if len(blob) == 0 || ttl <= 0 {
			run.args = append(run.args, argRef{&bk.old}, "", writeDelete)
		} else {
			bk.ttlBuf = strconv.AppendInt(bk.ttlBuf[:0], ttl, 10)
			bk.value = unsafe.String(unsafe.SliceData(blob), len(blob))
			bk.ttl = unsafe.String(unsafe.SliceData(bk.ttlBuf), len(bk.ttlBuf))
			run.args = append(run.args, argRef{&bk.old}, argRef{&bk.value}, argRef{&bk.ttl})
		}
	}
	if len(run.names) > 0 && run.perComponent {
		var packed []byte
		run.component, run.keyComp, packed = componentsOf(run.calls, b)
		run.args = append(run.args, packed)
	}
	if len(run.names) > 0 && run.writeNative {
		planNative(run)
	}
	return len(run.names) > 0 || len(run.native) > 0
}

// componentsOf numbers the components of calls: two calls that read a
// common key, directly or through other calls, share one (so a call decided
// after another on the same key stays with it, and so does one denied for
// it). It returns each call's component, that of each key the write names
// (in their order), and commit.lua's last argument: the same packed, "<I4"
// each.
func componentsOf(calls []*call, b *readBatch) (byCall, byKey []int32, packed []byte) {
	parent := make([]int32, len(calls))
	for i := range parent {
		parent[i] = int32(i)
	}
	find := func(i int32) int32 {
		for parent[i] != i {
			parent[i] = parent[parent[i]]
			i = parent[i]
		}
		return i
	}
	for i, c := range calls {
		for si := range c.p.Sections {
			bk := b.byName[string(c.p.Key(&c.p.Sections[si]))]
			if bk.reader == 0 {
				bk.reader = int32(i) + 1
				continue
			}
			if a, r := find(int32(i)), find(bk.reader-1); a != r {
				parent[a] = r
			}
		}
	}
	byCall = make([]int32, len(calls))
	for i := range calls {
		byCall[i] = find(int32(i))
	}
	for _, bk := range b.keys {
		if bk.check {
			c := find(bk.reader - 1)
			byKey = append(byKey, c)
			packed = binary.LittleEndian.AppendUint32(packed, uint32(c))
		}
	}
	return byCall, byKey, packed
}

// finishWrite takes the write's answer for held (ec: commit.lua's or
// commit_node.lua's, nil when every key was written natively): written,
// it answers the calls; a key changed since the read, it decides again in
// the script the calls the write refused (see refused, nativeAnswers); a
// cluster master that ran nothing of it (a key's slot moved), the same;
// failed, it fails them. It reports whether it wrote anything after the
// round trip (the script sent again, or decisions decided again).
func (s *Store) finishWrite(held *decidedInGo, ec *redis.Cmd, perr error) (late bool) {
	again, redo := s.commitAnswer(held, ec, perr)
	if held.b == nil {
		return held.sentAgain // failed whole, and finished
	}
	changed, redoNative := s.nativeAnswers(held, perr)
	again, redo = append(again, changed...), append(redo, redoNative...)
	if len(again) > 0 {
		s.conflicts.Add(1)
	}
	late = held.sentAgain
	if again = append(again, redo...); len(again) > 0 {
		late = true
		if held.lane.cluster {
			s.scriptAgain(held.ctx, again)
		} else {
			for _, c := range again {
				c.err, c.reply = nil, nil
			}
			s.runCalls(held.ctx, again)
		}
	}
	held.done()
	return late
}

// commitAnswer reads the answer of held's commit run (ec; nil when it had
// none): the calls it refused (again), those a cluster master did not run
// (redo). A failure fails the calls it carried; when it carried them all,
// held is finished (held.b is nil after).
func (s *Store) commitAnswer(held *decidedInGo, ec *redis.Cmd, perr error) (again, redo []*call) {
	if ec == nil {
		return nil, nil
	}
	err := answered(ec, ec.Val() != nil, perr)
	switch ec.Val().(type) {
	case int64, []any: // by key, or by component
		// Answered: a failure later in the pipeline may have stamped its
		// error on every command, this one included.
		err = nil
	}
	if err != nil && strings.Contains(err.Error(), "NOSCRIPT") {
		// The script cache was emptied (a restart, SCRIPT FLUSH, a new
		// master): nothing was written. Run loads it again.
		src, _, keys, args := held.commitRun()
		held.sentAgain = true
		if held.lane.cluster {
			// To the master itself: the cluster client's slot map may
			// name another node for the key now, or still (a master
			// just removed answers CLUSTERDOWN); the master answers
			// MOVED when the slot has left it, and the calls are
			// decided again in the script.
			ec = scriptCmd(held.ctx, "eval", src, keys, args)
			sendAlone(held.ctx, held.lane.client, ec, true)
		} else {
			ec = s.evalScript(held.ctx, src, keys, args...)
		}
		err = answered(ec, ec.Val() != nil, nil)
	}
	if err == nil {
		return s.refused(held, ec), nil
	}
	native := inNative(held)
	if held.lane.cluster && notOnThisMaster(err) {
		for i, c := range held.calls {
			if native == nil || !native[i] {
				redo = append(redo, c)
			}
		}
		return nil, redo
	}
	if native == nil {
		held.fail(err)
		return nil, nil
	}
	// Only the calls of the script's components: the native writes have
	// answers of their own.
	for i, c := range held.calls {
		if !native[i] && c.err == nil {
			c.err = err
		}
	}
	return nil, nil
}

// refused returns the calls whose write commit.lua refused, a key of
// theirs having changed since the read (every call, or with perComponent
// those of the refused components), and makes each changed key it names
// hot: the first one, or the first of each refused component.
func (s *Store) refused(held *decidedInGo, ec *redis.Cmd) []*call {
	var changed []int64
	if held.perComponent {
		changed, _ = ec.Int64Slice()
	} else if k, _ := ec.Int64(); k != 0 {
		changed = []int64{k}
	}
	if len(changed) == 0 {
		return nil
	}
	failed := make(map[int32]bool, len(changed))
	for _, k := range changed {
		if k >= 1 && int(k) <= len(held.names) {
			s.hot.mark(held.names[k-1])
			if held.perComponent {
				failed[held.keyComp[k-1]] = true
			}
		}
	}
	if !held.perComponent {
		return held.calls
	}
	var again []*call
	for i, c := range held.calls {
		if failed[held.component[i]] {
			again = append(again, c)
		}
	}
	return again
}

// allAdmitted reports whether every call was decided and admitted.
func allAdmitted(calls []*call) bool {
	for _, c := range calls {
		if c.err != nil || c.reply[0] != 1 {
			return false
		}
	}
	return true
}

// fail fails every call of the run and finishes it.
func (run *decidedInGo) fail(err error) {
	for _, c := range run.calls {
		c.err = err
	}
	run.done()
}

// done hands the calls their answers and releases the run.
func (run *decidedInGo) done() {
	finish(run.calls)
	run.cancel()
	run.b.reset()
	readBatches.Put(run.b)
	run.b = nil
}

// replyOf appends a decision's answer in the script's reply layout (see
// freqcap.lua): admitted, each section's record time, then per rule used,
// reset and retry.
func replyOf(p *limiter.Plan, admitted bool, dst []int64) []int64 {
	a := int64(0)
	if admitted {
		a = 1
	}
	dst = append(dst, a)
	for si := range p.Sections {
		dst = append(dst, p.Sections[si].Recorded)
	}
	for _, r := range p.Raw {
		retry := r.Retry
		if r.Ok {
			retry = 0
		}
		dst = append(dst, r.Used, r.Reset, retry)
	}
	return dst
}
