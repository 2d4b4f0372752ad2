package redisstore

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"
)

// Store is the shared store: record logs in Redis, decided in Go between a
// read and a compare-and-set write, or in lua/freqcap.lua, on the Redis
// server's clock.
//
// Concurrent decisions are batched on a lane (lane.go, batcher.go): off a
// cluster the one lane, on a cluster one lane a master, which a decision
// whose keys share one hash tag joins. A decision that finds its lane
// idle goes at once; those that arrive while a batch is in flight ride
// together in the next one, so under load one round trip serves many
// decisions, and at low load nothing waits.
//
// On a cluster, a decision whose keys span hash tags (a campaign budget
// beside the recipient's caps) is split by tag, one script run per tag,
// each reserved (decided and recorded) in parallel; if any denies or
// fails, every reservation made is refunded, so no rule is ever
// over-admitted and a denial leaves nothing behind (see cluster.go).
//
// The zero value is not usable; call New. A Store is safe for concurrent
// use, also by several gateways sharing one Redis.
type Store struct {
	client  Client
	cluster bool
	opts    Options
	// reloadedAt is when followFailover last had the slot map read
	// again (UnixNano), to pace it.
	reloadedAt atomic.Int64
	// main is the batcher's lane off a cluster; on a cluster, masters
	// holds one lane a master (lane.go).
	main    *lane
	masters masterLanes
	stop    chan struct{}
	// drained is closed when Close has stopped the batch loops: a call
	// not answered by then never will be.
	drained   chan struct{}
	wg        sync.WaitGroup
	closeOnce sync.Once
	// conflicts counts batches decided in Go whose write found a key
	// changed, and went to the script.
	conflicts atomic.Int64
	hot       *hotKeys
	// leases keeps two batch sends decided in Go from reading a key
	// between the other's read and write.
	leases *keyLeases
	// caps is each node's write path (capability.go); node names
	// the one node off a cluster.
	caps *writePaths
	node string
}

// Client is what the Redis store needs of a go-redis client: scripts and
// pipelines. *redis.Client, *redis.ClusterClient and the Sentinel failover
// client fit, as does any wrapper that passes these calls on. A hook on the
// client sees the store's writes wrapped so that go-redis never sends one
// twice on a cluster (see once.go); their Unwrap method gives the command.
type Client interface {
	redis.Scripter
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

// Options configure New.
type Options struct {
	// Prefix starts every key. Default "freqcap:".
	Prefix string
	// Timeout bounds every call to the store; past it the call fails with
	// ErrTimeout. Default 100ms. The client must honour context deadlines
	// (go-redis: ContextTimeoutEnabled) for the bound to cut a call short.
	Timeout time.Duration
	// Cluster splits every request by hash tag, one script run per tag,
	// as a Redis Cluster needs. Default false: the client is taken for a
	// cluster when it has ForEachMaster (as *redis.ClusterClient has), so
	// a wrapper that hides that method must set Cluster.
	Cluster bool
	// InFlight is how many batches may be in flight at once to the server
	// off a cluster (standalone and Sentinel; on a cluster see
	// MasterInFlight). Default 2: the decisions that arrive while a batch
	// is in a round trip ride together in the next, whose write travels
	// with the following read. Fewer, fuller batches cost Redis less a
	// decision, more keep the gateway busier: with 32 callers on
	// redisbench's data set, Valkey 8.1.1 spent 5.5, 4.9 and 5.7 µs a
	// decision with 1, 2 and 4 in flight, at 64,000, 89,000 and 105,000
	// decisions a second (see docs/performance.md). A lone decision never
	// waits.
	InFlight int
	// MasterInFlight is how many batches may be in flight at once to each
	// master of a cluster. Default 1: the callers' decisions spread over
	// the masters, so each master's batches are already smaller than a
	// standalone server's, and more loops a master would split them
	// further (32 callers on 3 masters: 2 a master cost Redis 1.5 times
	// the CPU a decision of 1, see docs/performance.md).
	MasterInFlight int
	// MaxBatch is the most decisions in one batch. Default 64, at
	// most 100: a run carries at most 255 rule specs.
	MaxBatch int
	// ScriptOnly decides every batch in freqcap.lua, in one round trip.
	// Default false: a batch is decided in Go between a read and a
	// compare-and-set write (on a cluster, on the lane of its keys'
	// master), which costs Redis less CPU, and in the script only when the
	// write finds a key changed since the read (see godecide.go).
	ScriptOnly bool
	// GoBatchMin is the fewest decisions a batch decided in Go holds when
	// its round trips would be its own: a smaller batch of decisions that
	// finds its lane idle (no other batch in a round trip, no write
	// waiting) is decided in the script, in one round trip instead of two.
	// Default 2: at low load a batch holds one decision, and one script run
	// costs it less than a read and then a write; under load batches are
	// bigger and their writes ride with the next reads, so they stay in Go.
	// 1: no batch goes to the script for being small (hot keys, calls
	// split by hash tag and ScriptOnly still do). With one batch in flight
	// (MasterInFlight's default) "idle" means that the one loop has no
	// write to send.
	GoBatchMin int
	// Now replaces the server's TIME when set. Default nil (TIME); for
	// tests only: gateways share one clock only through TIME.
	Now func() time.Time
	// NoNativeWrite writes every decision made in Go with commit.lua, even
	// on a node that has SET … IFEQ. Default false: where a node has it,
	// a key that no other key of the same decisions shares a write with is
	// written with SET … IFEQ (see nativewrite.go), at about the cost
	// of a plain SET. For comparing the two, and as a way back.
	NoNativeWrite bool
	// OnWritePath, when set, is called each time a node's write path is
	// found or changes (WritePaths lists them all), from a goroutine of
	// the store: it must not block. Default nil.
	OnWritePath func(NodeWritePath)
}

// hotHold is how long a key whose write from Go conflicted sends the
// batches that touch it to the script.
const hotHold = time.Second

// New returns a store on client. It does not connect; the first call
// does. Close stops the batching goroutines; the client stays open (its
// owner closes it).
func New(client Client, opts Options) *Store {
	if opts.Prefix == "" {
		opts.Prefix = "freqcap:"
	}
	if opts.Timeout <= 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.InFlight <= 0 {
		opts.InFlight = 2
	}
	if opts.MasterInFlight <= 0 {
		opts.MasterInFlight = 1
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
	cluster := opts.Cluster || isCluster(client)
	s := &Store{client: client, cluster: cluster, opts: opts, stop: make(chan struct{}), drained: make(chan struct{}), hot: newHotKeys(time.Now, hotHold), leases: newKeyLeases()}
	s.caps, s.node = newWritePaths(time.Now, opts.Timeout, nativeOff(opts), opts.OnWritePath), standaloneNode(client)
	if !cluster {
		s.main = s.newLane(client, s.node, false)
	}
	return s
}

// Decide implements Store.
func (s *Store) Decide(ctx context.Context, req *limiter.Request) (*limiter.Decision, error) {
	d, err := s.decide(ctx, req, opDecide)
	s.followFailover(err)
	return d, err
}

// Usage implements Store.
func (s *Store) Usage(ctx context.Context, req *limiter.Request) (*limiter.Decision, error) {
	d, err := s.decide(ctx, req, opPeek)
	s.followFailover(err)
	return d, err
}

// Refund implements Store.
func (s *Store) Refund(ctx context.Context, id string) (bool, error) {
	recs, err := recordlog.DecodeID(id)
	if err != nil {
		return false, nil
	}
	given, err := s.refund(ctx, recs)
	s.followFailover(err)
	return given, err
}

// Reset implements Store. Resets are rare: they run unbatched, one run per
// hash tag.
func (s *Store) Reset(ctx context.Context, req *limiter.Request) error {
	nowArg, approx := s.nowArg(req)
	p := limiter.GetPlan()
	defer p.Release()
	if err := p.Build(s.opts.Prefix, req, approx); err != nil {
		return err
	}
	groups := s.byTag(len(p.Sections), func(i int) string { return string(p.Key(&p.Sections[i])) })
	errs := make([]error, len(groups))
	s.each(len(groups), func(gi int) {
		keys, args := resetArgs(p, groups[gi], nowArg, req.Keep.Milliseconds())
		_, errs[gi] = s.runBounded(ctx, keys, args)
	})
	var firstErr error
	for _, e := range errs {
		firstErr = cmpErr(firstErr, e)
	}
	s.followFailover(firstErr)
	return firstErr
}

// Conflicts is how many batches decided in Go found a key changed at their
// write, and were decided again in the script.
func (s *Store) Conflicts() int64 { return s.conflicts.Load() }

// Close stops the batching goroutines, once their writes are answered; the
// client stays open.
func (s *Store) Close() error {
	s.closeOnce.Do(func() {
		s.masters.closeLanes()
		close(s.stop)
		s.wg.Wait()
		s.caps.close()
		close(s.drained)
	})
	return nil
}

// nowArg is the "now" ARGV: the request's time, the test clock, or 0 for
// the server's TIME. approx is the gateway's idea of now, for calendar
// periods.
func (s *Store) nowArg(req *limiter.Request) (arg int64, approx time.Time) {
	switch {
	case !req.Now.IsZero():
		return req.Now.UnixMilli(), req.Now
	case s.opts.Now != nil:
		t := s.opts.Now()
		return t.UnixMilli(), t
	}
	return 0, time.Now()
}

func (s *Store) decide(ctx context.Context, req *limiter.Request, op string) (*limiter.Decision, error) {
	nowArg, approx := s.nowArg(req)
	w := getRedisWork()
	p := &w.plan
	if err := p.Build(s.opts.Prefix, req, approx); err != nil {
		w.release()
		return nil, err
	}
	calls := s.calls(w, op, nowArg)
	if err := s.do(ctx, calls); err != nil {
		// A batched run may still read the plan: leave it to the GC.
		return nil, err
	}
	defer w.release()

	// Put the calls' answers back in plan order.
	p.Raw = append(p.Raw[:0], make([]recordlog.RawResult, len(p.Rules))...)
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
		c.unpackReply(p)
	}
	if op == opDecide && (firstErr != nil || !admitted) && len(calls) > 1 {
		s.rollback(p, calls)
	}
	if firstErr != nil {
		return nil, firstErr
	}
	return p.Finish(req, now, admitted), nil
}

// refund runs unbatched, one run per hash tag, the runs of a cluster in
// one pipeline (one round trip per node: a batch's refund may span
// hundreds of tags): refunds are rare.
func (s *Store) refund(ctx context.Context, recs []recordlog.Recorded) (bool, error) {
	nowArg, _ := s.nowArg(&limiter.Request{})
	groups := s.byTag(len(recs), func(i int) string { return recs[i].Key })
	runs := make([]scriptRun, len(groups))
	for gi, g := range groups {
		keys, args := refundArgs(recs, g, nowArg)
		runs[gi] = scriptRun{keys: keys, args: args}
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	s.runAll(ctx, runs)
	cancel()
	given := false
	var firstErr error
	for _, r := range runs {
		if r.err != nil {
			firstErr = cmpErr(firstErr, r.err)
		} else if len(r.rep) > 0 && r.rep[0] > 0 {
			given = true
		}
	}
	return given, firstErr
}
