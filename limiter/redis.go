package limiter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/lua"
)

// Redis is the shared store: decisions run lua/freqcap.lua (EVALSHA, EVAL on
// NOSCRIPT) on the Redis server's clock.
//
// On a standalone server or Sentinel all keys of a request form one group:
// one script run, atomic. Concurrent decisions are batched: a decision that
// finds the store idle goes at once, and those that arrive while a run is in
// flight ride together in the next one, so under load one run (and one
// round trip) serves many decisions, and at low load nothing waits.
//
// On a cluster, a request's keys are grouped by hash tag, one script run per
// group. Groups on different tags are each reserved (decided and recorded)
// in parallel; if any denies or fails, every reservation made is refunded,
// so no rule is ever over-admitted and a denial leaves nothing behind.
type Redis struct {
	client  redis.UniversalClient
	cluster bool
	opts    RedisOptions
	batches chan *call
	stop    chan struct{}
	// drained is closed when Close has stopped the batch loops: a call
	// not answered by then never will be.
	drained chan struct{}
	wg      sync.WaitGroup
	once    sync.Once
	// conflicts counts batches decided in Go whose write found a key
	// changed, and went to the script.
	conflicts atomic.Int64
	// busy counts the batch loops that have a batch or a held write (from
	// taking a batch to sending its last write): with none, the store is
	// idle.
	busy atomic.Int32
	// beforeCommit, when set, runs between a Go batch's read and its write
	// (tests: to write in between).
	beforeCommit func()
	hot          *hotKeys
}

var errStoreClosed = fmt.Errorf("%w: store closed", ErrStore)

// hotHold is how long a key whose write from Go conflicted sends the
// batches that touch it to the script.
const hotHold = time.Second

// RedisOptions configure NewRedis.
type RedisOptions struct {
	// Prefix starts every key. Default "freqcap:".
	Prefix string
	// Timeout bounds every call to the store; past it the call fails with
	// ErrTimeout. Default 100ms. The client must honour context deadlines
	// (go-redis: ContextTimeoutEnabled) for the bound to cut a call short.
	Timeout time.Duration
	// InFlight is how many batches may be in flight at once (standalone
	// and Sentinel). Default 4: a batch is a round trip and then Go work,
	// and four keep both the gateway and Redis busy (3: 1-8% fewer
	// decisions a second, 6: 5% more Redis CPU a decision, in
	// examples/redisbench); fewer make bigger batches, and a lone decision
	// never waits.
	InFlight int
	// MaxBatch is the most decisions in one batch. Default 64, at
	// most 100.
	MaxBatch int
	// ScriptOnly decides every batch in freqcap.lua, in one round trip, as
	// on a cluster. Default false: off a cluster a batch is decided in Go
	// between a read and a compare-and-set write (two round trips, a third
	// of the Redis CPU), and in the script only when the write finds a key
	// changed since the read.
	ScriptOnly bool
	// GoBatchMin is the fewest decisions a batch decided in Go holds when
	// its round trips would be its own: a smaller batch of decisions that
	// finds the store idle (no other batch in a round trip, no write
	// waiting) is decided in the script, in one round trip instead of two.
	// Default 2: at low load batches hold one decision, and one script run
	// costs it less time and less Redis CPU than a read and then a write,
	// each of which wakes Redis (BenchmarkRedisDecideOneCaller; see the
	// README's Performance section). Under load batches are bigger and
	// their writes ride with the next reads, so they stay in Go. 1: no
	// batch goes to the script for being small (hot keys, calls split by
	// hash tag and ScriptOnly still do). With InFlight 1 "idle" only means
	// that the one loop has no write to send.
	GoBatchMin int
	// Now replaces the server's TIME when set. For tests only: gateways
	// share one clock only through TIME.
	Now func() time.Time
}

var freqcapScript = redis.NewScript(lua.Freqcap)

// NewRedis returns a store on client. It does not connect; the first call
// does. Close stops the batching goroutines; the client stays open (its
// owner closes it).
func NewRedis(client redis.UniversalClient, opts RedisOptions) *Redis {
	if opts.Prefix == "" {
		opts.Prefix = "freqcap:"
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.InFlight <= 0 {
		opts.InFlight = 4
	}
	if opts.MaxBatch <= 0 {
		opts.MaxBatch = 64
	}
	if opts.GoBatchMin <= 0 {
		opts.GoBatchMin = 2
	}
	// A run carries at most 255 rule specs, two per decision at most in
	// practice (calendar zones vary by recipient).
	opts.MaxBatch = min(opts.MaxBatch, 100)
	_, cluster := client.(*redis.ClusterClient)
	s := &Redis{client: client, cluster: cluster, opts: opts, stop: make(chan struct{}), drained: make(chan struct{}), hot: newHotKeys(time.Now, hotHold)}
	if !cluster {
		s.batches = make(chan *call, 4*opts.MaxBatch)
		for i := 0; i < opts.InFlight; i++ {
			s.wg.Add(1)
			go s.batchLoop()
		}
	}
	return s
}

// Decide implements Store.
func (s *Redis) Decide(ctx context.Context, req *Request) (*Decision, error) {
	return s.decide(ctx, req, "d")
}

// Usage implements Store.
func (s *Redis) Usage(ctx context.Context, req *Request) (*Decision, error) {
	return s.decide(ctx, req, "p")
}

// nowArg is the "now" ARGV: the request's time, the test clock, or 0 for
// the server's TIME. approx is the gateway's idea of now, for calendar
// periods.
func (s *Redis) nowArg(req *Request) (arg int64, approx time.Time) {
	switch {
	case !req.Now.IsZero():
		return req.Now.UnixMilli(), req.Now
	case s.opts.Now != nil:
		t := s.opts.Now()
		return t.UnixMilli(), t
	}
	return 0, time.Now()
}

// call is one script run's worth of one decision: the sections of a plan
// that share a hash tag (all of them off a cluster).
type call struct {
	op   string
	now  int64
	p    *plan
	secs []int // indices into p.sections
	// Filled in by the run:
	reply []int64 // this decision's part: admitted, record times, rule answers
	at    int64   // the run's now
	err   error
	done  chan struct{} // one signal when answered (buffered: reused with the plan)
}

// replyLen is the length of a call's part of the reply.
func (c *call) replyLen() int {
	n := 2 + len(c.secs)
	for _, si := range c.secs {
		n += 3 * (c.p.sections[si].r1 - c.p.sections[si].r0)
	}
	return n
}

// runArgs builds one script run's KEYS and ARGV for decisions. Numbers are
// packed little-endian (the script unpacks them with struct.unpack: far
// cheaper in Redis than tonumber on strings), and rule specs are sent once
// per run and referred to by index: a batch of decisions under one config
// repeats the same few.
type runArgs struct {
	keys     keyList
	keyIndex map[string]int
	specs    []byte // count, then the specs
	nspecs   int
	specIdx  map[string]int
	decs     []byte // count, then the decisions
	ids      []any
	spec     []byte
}

func newRunArgs(n int) *runArgs {
	return &runArgs{
		keyIndex: make(map[string]int, 2*n),
		specIdx:  make(map[string]int, 2),
		specs:    []byte{0},
		decs:     []byte{0, 0},
	}
}

func (ra *runArgs) key(k []byte) int {
	if i, ok := ra.keyIndex[string(k)]; ok {
		return i
	}
	ra.keys = append(ra.keys, string(k))
	ra.keyIndex[string(k)] = len(ra.keys)
	return len(ra.keys)
}

// specOf returns the index of a section's rule spec, adding it when new.
func (ra *runArgs) specOf(p *plan, sec *section) int {
	b := ra.spec[:0]
	b = appendUint(b, uint64(sec.retention), 6)
	b = appendUint(b, uint64(sec.grain), 6)
	b = append(b, byte(sec.r1-sec.r0))
	for _, r := range p.rules[sec.r0:sec.r1] {
		b = appendUint(b, uint64(r.limit), 6)
		b = appendUint(b, uint64(r.window), 6)
		if r.window == 0 {
			for _, x := range r.bounds {
				b = appendUint(b, uint64(x), 6)
			}
		}
	}
	ra.spec = b
	if i, ok := ra.specIdx[string(b)]; ok {
		return i
	}
	ra.specs = append(ra.specs, b...)
	ra.nspecs++
	ra.specIdx[string(b)] = ra.nspecs
	return ra.nspecs
}

// add appends the call's decision.
func (ra *runArgs) add(c *call) {
	ra.decs = appendUint(ra.decs, uint64(c.now), 6)
	ra.decs = append(ra.decs, byte(len(c.secs)))
	for _, si := range c.secs {
		sec := &c.p.sections[si]
		ra.decs = appendUint(ra.decs, uint64(ra.key(c.p.key(sec))), 2)
		ra.decs = appendUint(ra.decs, uint64(ra.specOf(c.p, sec)), 2)
		ra.decs = appendUint(ra.decs, uint64(sec.cost), 6)
		ra.ids = append(ra.ids, string(c.p.sub(sec)))
	}
}

// appendUint appends the n low bytes of v, little-endian.
func appendUint(b []byte, v uint64, n int) []byte {
	for i := 0; i < n; i++ {
		b = append(b, byte(v>>(8*i)))
	}
	return b
}

// runCalls runs calls of one op in one script run and hands each its part
// of the reply.
func (s *Redis) runCalls(ctx context.Context, calls []*call) {
	ra := newRunArgs(len(calls))
	for i, c := range calls {
		ra.add(c)
		if ra.nspecs > 255 && i > 0 {
			// The script counts specs in a byte: run in two halves (a
			// decision alone has at most 255 sections).
			s.runCalls(ctx, calls[:len(calls)/2])
			s.runCalls(ctx, calls[len(calls)/2:])
			return
		}
	}
	ra.specs[0] = byte(ra.nspecs)
	ra.decs[0], ra.decs[1] = byte(len(calls)), byte(len(calls)>>8)
	args := make([]any, 0, 3+len(ra.ids))
	args = append(args, calls[0].op, ra.specs, ra.decs)
	args = append(args, ra.ids...)
	rep, err := s.run(ctx, ra.keys, args)
	k := 0
	for _, c := range calls {
		switch n := c.replyLen(); {
		case err != nil:
			c.err = err
		case k+n > len(rep):
			c.err = fmt.Errorf("%w: short reply from script", ErrStore)
		default:
			c.at, c.reply = rep[k], rep[k+1:k+n:k+n] // appends must not reach the next call's part
			k += n
		}
	}
}

// wholePlans reports whether every call carries every section of its plan,
// as the Go path needs (a call split by hash tag does not).
func wholePlans(batch []*call) bool {
	for _, c := range batch {
		if len(c.secs) != len(c.p.sections) {
			return false
		}
	}
	return true
}

// batchLoop serves batched calls: it takes one, adds whatever else is
// already waiting with the same op, and decides them together: in Go (see
// redisgo.go), or in the script when ScriptOnly is set, a lone decision
// finds the store idle (see GoBatchMin), a call is split by hash tag, or a
// key is hot (see hotKeys). A batch decided in Go holds its write until the
// next round trip, which carries it with the next batch's read.
func (s *Redis) batchLoop() {
	defer s.wg.Done()
	var pending *call
	var held *goRun // while it is not nil, this loop is counted in s.busy
	for {
		batch := s.collect(&pending, held == nil)
		if batch == nil && held == nil {
			return // stopped
		}
		// The store is idle when no loop is counted: no other batch in a
		// round trip, no write waiting anywhere. Taking the count and
		// testing it is one step, so two loops cannot both find it idle.
		idle := false
		if held == nil {
			if idle = s.busy.CompareAndSwap(0, 1); !idle {
				s.busy.Add(1)
			}
		}
		lone := idle && batch != nil && len(batch) < s.opts.GoBatchMin && batch[0].op == "d"
		if batch != nil && (s.opts.ScriptOnly || lone || !wholePlans(batch) || s.hot.touches(batch)) {
			held = s.goRound(held, nil)
			ctx, cancel := context.WithTimeout(context.Background(), s.opts.Timeout)
			s.runCalls(ctx, batch)
			cancel()
			finish(batch)
		} else {
			held = s.goRound(held, batch)
		}
		if held == nil {
			s.busy.Add(-1)
		}
	}
}

// collect takes the next batch of calls of one op. Without block it
// returns nil at once when no call waits; with it, it waits for one, and
// returns nil when the store is closed.
func (s *Redis) collect(pending **call, block bool) []*call {
	first := *pending
	*pending = nil
	if first == nil {
		if block {
			select {
			case first = <-s.batches:
			case <-s.stop:
				return nil
			}
		} else {
			select {
			case first = <-s.batches:
			default:
				return nil
			}
		}
	}
	batch := []*call{first}
	// Let goroutines that are ready to run (callers woken by the last
	// run) queue their calls first: with few cores the woken loop would
	// otherwise run before them and carry one call a run. Nothing waits
	// when nothing else is ready.
	runtime.Gosched()
	for len(batch) < s.opts.MaxBatch {
		select {
		case c := <-s.batches:
			if c.op != first.op {
				*pending = c
				return batch
			}
			batch = append(batch, c)
		default:
			return batch
		}
	}
	return batch
}

// finish hands the calls their answers. done has room for one signal, so
// this never blocks, even when the caller has given up waiting.
func finish(calls []*call) {
	for _, c := range calls {
		c.done <- struct{}{}
	}
}

// do runs the calls: through the batcher off a cluster, else one run each,
// in parallel.
func (s *Redis) do(ctx context.Context, calls []*call) error {
	if s.batches == nil {
		ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
		defer cancel()
		s.each(len(calls), func(i int) { s.runCalls(ctx, calls[i:i+1]) })
		return nil
	}
	// A timer rather than a context: this is every decision's path.
	timer := time.NewTimer(s.opts.Timeout)
	defer timer.Stop()
	for _, c := range calls {
		select {
		case s.batches <- c:
		case <-timer.C:
			return s.timedOut()
		case <-ctx.Done():
			return classify(ctx.Err())
		case <-s.stop:
			return errStoreClosed
		}
	}
	for _, c := range calls {
		select {
		case <-c.done:
		case <-timer.C:
			// The run may still record this decision: an over-count
			// until the record leaves its windows, never an over-admission.
			return s.timedOut()
		case <-ctx.Done():
			return classify(ctx.Err())
		case <-s.drained:
			select {
			case <-c.done:
			default:
				return errStoreClosed // queued as the store closed
			}
		}
	}
	return nil
}

func (s *Redis) timedOut() error {
	return fmt.Errorf("%w: no answer within %s", ErrTimeout, s.opts.Timeout)
}

// calls splits a plan into calls: by hash tag on a cluster, else one.
func (s *Redis) calls(p *plan, op string, now int64) []*call {
	if !s.cluster {
		// The plan's own call, reused with the plan.
		c := &p.call
		c.op, c.now, c.p, c.at, c.err = op, now, p, 0, nil
		c.secs, c.reply = c.secs[:0], c.reply[:0]
		for i := range p.sections {
			c.secs = append(c.secs, i)
		}
		if c.done == nil {
			c.done = make(chan struct{}, 1)
		}
		p.calls[0] = c
		return p.calls[:]
	}
	var out []*call
	tags := map[string]*call{}
	for si := range p.sections {
		tag := hashTag(string(p.key(&p.sections[si])))
		c := tags[tag]
		if c == nil {
			c = &call{op: op, now: now, p: p, done: make(chan struct{}, 1)}
			tags[tag] = c
			out = append(out, c)
		}
		c.secs = append(c.secs, si)
	}
	return out
}

func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

func (s *Redis) decide(ctx context.Context, req *Request, op string) (*Decision, error) {
	nowArg, approx := s.nowArg(req)
	p := getPlan()
	if err := p.build(s.opts.Prefix, req, approx); err != nil {
		p.release()
		return nil, err
	}
	calls := s.calls(p, op, nowArg)
	if err := s.do(ctx, calls); err != nil {
		// A batched run may still read the plan: leave it to the GC.
		return nil, err
	}
	defer p.release()

	// Put the calls' answers back in plan order.
	p.raw = append(p.raw[:0], make([]rawResult, len(p.rules))...)
	admitted := true
	var now int64
	var firstErr error
	for _, c := range calls {
		if c.err != nil {
			firstErr = cmpErr(firstErr, c.err)
			continue
		}
		admitted = admitted && c.reply[0] == 1
		if now == 0 {
			now = c.at
		}
		k := 1 + len(c.secs)
		for i, si := range c.secs {
			sec := &p.sections[si]
			sec.recorded = c.reply[1+i]
			for ri := sec.r0; ri < sec.r1; ri++ {
				p.raw[ri] = rawResult{used: c.reply[k], reset: c.reply[k+1], retry: c.reply[k+2], ok: c.reply[k+2] == 0}
				k += 3
			}
		}
	}
	if op == "d" && (firstErr != nil || !admitted) && len(calls) > 1 {
		s.rollback(p, calls)
	}
	if firstErr != nil {
		return nil, firstErr
	}
	return p.finish(req, now, admitted), nil
}

// rollback refunds what the calls that admitted recorded, when another call
// of the same decision denied or failed. It has its own deadline: the
// caller's may be spent.
func (s *Redis) rollback(p *plan, calls []*call) {
	var recs []recorded
	for _, c := range calls {
		if c.err != nil || c.reply[0] != 1 {
			continue
		}
		for _, si := range c.secs {
			sec := &p.sections[si]
			if sec.recorded > 0 {
				recs = append(recs, recorded{key: string(p.key(sec)), sub: string(p.sub(sec)), grain: sec.grain, t: sec.recorded, c: sec.cost})
			}
		}
	}
	if len(recs) > 0 {
		// A failed rollback leaves a reservation that only over-counts,
		// until its records leave their windows: never an over-admission.
		_, _ = s.refund(context.Background(), recs)
	}
}

// Refund implements Store.
func (s *Redis) Refund(ctx context.Context, id string) (bool, error) {
	recs, err := decodeID(id)
	if err != nil {
		return false, nil
	}
	return s.refund(ctx, recs)
}

// refund and Reset are rare: they run unbatched, one run per hash tag.
func (s *Redis) refund(ctx context.Context, recs []recorded) (bool, error) {
	nowArg, _ := s.nowArg(&Request{})
	groups := s.byTag(len(recs), func(i int) string { return recs[i].key })
	replies := make([][]int64, len(groups))
	errs := make([]error, len(groups))
	s.each(len(groups), func(gi int) {
		var keys keyList
		args := []any{"r", nowArg, len(groups[gi])}
		for _, ri := range groups[gi] {
			r := &recs[ri]
			args = append(args, keys.index(r.key), r.sub, r.grain, r.t, r.c)
		}
		replies[gi], errs[gi] = s.runBounded(ctx, keys, args)
	})
	given := false
	var firstErr error
	for gi := range groups {
		if errs[gi] != nil {
			firstErr = cmpErr(firstErr, errs[gi])
		} else if len(replies[gi]) > 0 && replies[gi][0] > 0 {
			given = true
		}
	}
	return given, firstErr
}

// Reset implements Store.
func (s *Redis) Reset(ctx context.Context, req *Request) error {
	nowArg, approx := s.nowArg(req)
	p := getPlan()
	defer p.release()
	if err := p.build(s.opts.Prefix, req, approx); err != nil {
		return err
	}
	groups := s.byTag(len(p.sections), func(i int) string { return string(p.key(&p.sections[i])) })
	errs := make([]error, len(groups))
	s.each(len(groups), func(gi int) {
		var keys keyList
		args := []any{"x", nowArg, len(groups[gi])}
		for _, si := range groups[gi] {
			args = append(args, keys.index(string(p.key(&p.sections[si]))), string(p.sub(&p.sections[si])))
		}
		_, errs[gi] = s.runBounded(ctx, keys, args)
	})
	var firstErr error
	for _, e := range errs {
		firstErr = cmpErr(firstErr, e)
	}
	return firstErr
}

// byTag groups n items by the hash tag of their keys on a cluster; off a
// cluster they are one group.
func (s *Redis) byTag(n int, key func(int) string) [][]int {
	var groups [][]int
	index := map[string]int{}
	for i := 0; i < n; i++ {
		tag := ""
		if s.cluster {
			tag = hashTag(key(i))
		}
		gi, ok := index[tag]
		if !ok {
			gi = len(groups)
			index[tag] = gi
			groups = append(groups, nil)
		}
		groups[gi] = append(groups[gi], i)
	}
	return groups
}

// Conflicts is how many batches decided in Go found a key changed at their
// write, and were decided again in the script.
func (s *Redis) Conflicts() int64 { return s.conflicts.Load() }

// Close stops the batching goroutines, once their writes are answered; the
// client stays open.
func (s *Redis) Close() error {
	s.once.Do(func() {
		close(s.stop)
		s.wg.Wait()
		close(s.drained)
	})
	return nil
}

// each runs f for 0..n-1, in parallel when n > 1.
func (s *Redis) each(n int, f func(int)) {
	if n == 1 {
		f(0)
		return
	}
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f(i)
		}()
	}
	wg.Wait()
}

// keyList is a script run's KEYS: each key once, since the script decodes
// and writes back each KEYS entry on its own.
type keyList []string

// index returns the 1-based KEYS index of key, adding it when new.
func (l *keyList) index(key string) int {
	for i, k := range *l {
		if k == key {
			return i + 1
		}
	}
	*l = append(*l, key)
	return len(*l)
}

func (s *Redis) runBounded(ctx context.Context, keys []string, args []any) ([]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	return s.run(ctx, keys, args)
}

// run runs the script once and returns its reply as integers (a single
// integer reply becomes a one-element slice).
func (s *Redis) run(ctx context.Context, keys []string, args []any) ([]int64, error) {
	v, err := freqcapScript.Run(ctx, s.client, keys, args...).Result()
	if err != nil {
		return nil, classify(err)
	}
	switch v := v.(type) {
	case int64:
		return []int64{v}, nil
	case []any:
		out := make([]int64, len(v))
		for i, x := range v {
			n, ok := x.(int64)
			if !ok {
				return nil, fmt.Errorf("%w: unexpected script reply element %T", ErrStore, x)
			}
			out[i] = n
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: unexpected script reply %T", ErrStore, v)
}

// classify wraps a client error in ErrTimeout, ErrClockSkew or ErrStore.
func classify(err error) error {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return fmt.Errorf("%w: %v", ErrTimeout, err)
	case strings.HasPrefix(err.Error(), "CLOCKSKEW"):
		return fmt.Errorf("%w: %v", ErrClockSkew, err)
	}
	return fmt.Errorf("%w: %v", ErrStore, err)
}

// cmpErr keeps the first error, preferring a timeout (callers treat both
// alike, and a timeout says more about where the time went).
func cmpErr(have, next error) error {
	if have == nil || (next != nil && errors.Is(next, ErrTimeout) && !errors.Is(have, ErrTimeout)) {
		return next
	}
	return have
}
