package limiter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/lua"
)

// Redis is the shared store: every decision is one run of lua/freqcap.lua
// (EVALSHA, EVAL on NOSCRIPT) per group of keys that share a hash tag, on
// the Redis server's clock. On a standalone server or Sentinel all keys of a
// request form one group: one round trip, atomic. On a cluster, groups on
// different tags are each reserved (decided and recorded) in parallel; if
// any denies or fails, every reservation made is refunded, so no rule is
// ever over-admitted and a denial leaves nothing behind.
type Redis struct {
	client  redis.UniversalClient
	cluster bool
	opts    RedisOptions
}

// RedisOptions configure NewRedis.
type RedisOptions struct {
	// Prefix starts every key. Default "freqcap:".
	Prefix string
	// Timeout bounds every call to the store; past it the call fails with
	// ErrTimeout. Default 100ms. The client must honour context deadlines
	// (go-redis: ContextTimeoutEnabled) for the bound to cut a call short.
	Timeout time.Duration
	// Now replaces the server's TIME when set. For tests only: gateways
	// share one clock only through TIME.
	Now func() time.Time
}

var freqcapScript = redis.NewScript(lua.Freqcap)

// NewRedis returns a store on client. It does not connect; the first call
// does. Close does not close the client, which the caller owns.
func NewRedis(client redis.UniversalClient, opts RedisOptions) *Redis {
	if opts.Prefix == "" {
		opts.Prefix = "freqcap:"
	}
	if opts.Timeout <= 0 {
		opts.Timeout = 100 * time.Millisecond
	}
	_, cluster := client.(*redis.ClusterClient)
	return &Redis{client: client, cluster: cluster, opts: opts}
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

// group is the part of a plan that one script run decides.
type group struct {
	keys     []string
	sections []int // indices into plan.sections
}

// groups splits a plan by hash tag on a cluster; elsewhere it is one group.
func (s *Redis) groups(keysOf []string) []group {
	var gs []group
	tagIndex := map[string]int{}
	for i, key := range keysOf {
		tag := ""
		if s.cluster {
			tag = hashTag(key)
		}
		gi, ok := tagIndex[tag]
		if !ok {
			gi = len(gs)
			tagIndex[tag] = gi
			gs = append(gs, group{})
		}
		gs[gi].sections = append(gs[gi].sections, i)
	}
	return gs
}

func hashTag(key string) string {
	if i := strings.IndexByte(key, '{'); i >= 0 {
		if j := strings.IndexByte(key[i+1:], '}'); j > 0 {
			return key[i+1 : i+1+j]
		}
	}
	return key
}

// keyIndex returns the 1-based KEYS index of key in g, adding it.
func (g *group) keyIndex(key string) int {
	for i, k := range g.keys {
		if k == key {
			return i + 1
		}
	}
	g.keys = append(g.keys, key)
	return len(g.keys)
}

func (s *Redis) decide(ctx context.Context, req *Request, op string) (*Decision, error) {
	nowArg, approx := s.nowArg(req)
	p, err := buildPlan(s.opts.Prefix, req, approx)
	if err != nil {
		return nil, err
	}
	keysOf := make([]string, len(p.sections))
	for i := range p.sections {
		keysOf[i] = p.sections[i].key
	}
	gs := s.groups(keysOf)
	replies := make([][]int64, len(gs))
	errs := make([]error, len(gs))
	run := func(gi int) {
		g := &gs[gi]
		args := []any{op, nowArg, len(g.sections)}
		for _, si := range g.sections {
			sec := &p.sections[si]
			args = append(args, g.keyIndex(sec.key), sec.sub, sec.retention, sec.grain, sec.cost, len(sec.rules))
			for _, r := range sec.rules {
				args = append(args, r.limit, r.window)
				if r.window == 0 {
					args = append(args, r.bounds[0], r.bounds[1], r.bounds[2], r.bounds[3])
				}
			}
		}
		replies[gi], errs[gi] = s.run(ctx, g.keys, args)
	}
	s.each(len(gs), run)

	// Put the groups' answers back in plan order.
	raw := make([]rawResult, 0, len(req.Checks))
	recTimes := make([]int64, len(p.sections))
	ruleAt := make([][]rawResult, len(p.sections))
	admitted := true
	var now int64
	var firstErr error
	for gi, g := range gs {
		if errs[gi] != nil {
			firstErr = cmpErr(firstErr, errs[gi])
			continue
		}
		rep := replies[gi]
		if len(rep) < 2+len(g.sections) {
			firstErr = cmpErr(firstErr, fmt.Errorf("%w: short reply from script", ErrStore))
			continue
		}
		admitted = admitted && rep[0] == 1
		if now == 0 {
			now = rep[1]
		}
		k := 2 + len(g.sections)
		for i, si := range g.sections {
			recTimes[si] = rep[2+i]
			for range p.sections[si].rules {
				if k+4 > len(rep) {
					return nil, fmt.Errorf("%w: short reply from script", ErrStore)
				}
				ruleAt[si] = append(ruleAt[si], rawResult{used: rep[k], reset: rep[k+1], retry: rep[k+2], ok: rep[k+3] == 1})
				k += 4
			}
		}
	}
	if op == "d" && (firstErr != nil || !admitted) && len(gs) > 1 {
		s.rollback(p, gs, replies, errs)
	}
	if firstErr != nil {
		return nil, firstErr
	}
	for si := range p.sections {
		raw = append(raw, ruleAt[si]...)
	}
	d := p.finish(req, now, raw, admitted)
	if op == "d" && admitted {
		var recs []recorded
		for si, sec := range p.sections {
			if recTimes[si] > 0 {
				recs = append(recs, recorded{key: sec.key, sub: sec.sub, grain: sec.grain, t: recTimes[si], c: sec.cost})
			}
		}
		d.ID = encodeID(recs)
	}
	return d, nil
}

// rollback refunds what the groups that admitted recorded, when another
// group denied or failed. It has its own deadline: the caller's may be spent.
func (s *Redis) rollback(p *plan, gs []group, replies [][]int64, errs []error) {
	var recs []recorded
	for gi, g := range gs {
		if errs[gi] != nil || replies[gi][0] != 1 {
			continue
		}
		for i, si := range g.sections {
			if t := replies[gi][2+i]; t > 0 {
				sec := &p.sections[si]
				recs = append(recs, recorded{key: sec.key, sub: sec.sub, grain: sec.grain, t: t, c: sec.cost})
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

func (s *Redis) refund(ctx context.Context, recs []recorded) (bool, error) {
	nowArg, _ := s.nowArg(&Request{})
	keysOf := make([]string, len(recs))
	for i := range recs {
		keysOf[i] = recs[i].key
	}
	gs := s.groups(keysOf)
	replies := make([][]int64, len(gs))
	errs := make([]error, len(gs))
	s.each(len(gs), func(gi int) {
		g := &gs[gi]
		args := []any{"r", nowArg, len(g.sections)}
		for _, ri := range g.sections {
			r := &recs[ri]
			args = append(args, g.keyIndex(r.key), r.sub, r.grain, r.t, r.c)
		}
		replies[gi], errs[gi] = s.run(ctx, g.keys, args)
	})
	given := false
	var firstErr error
	for gi := range gs {
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
	p, err := buildPlan(s.opts.Prefix, req, approx)
	if err != nil {
		return err
	}
	keysOf := make([]string, len(p.sections))
	for i := range p.sections {
		keysOf[i] = p.sections[i].key
	}
	gs := s.groups(keysOf)
	errs := make([]error, len(gs))
	s.each(len(gs), func(gi int) {
		g := &gs[gi]
		args := []any{"x", nowArg, len(g.sections)}
		for _, si := range g.sections {
			args = append(args, g.keyIndex(p.sections[si].key), p.sections[si].sub)
		}
		_, errs[gi] = s.run(ctx, g.keys, args)
	})
	var firstErr error
	for _, e := range errs {
		firstErr = cmpErr(firstErr, e)
	}
	return firstErr
}

// Close implements Store; the client stays open (its owner closes it).
func (s *Redis) Close() error { return nil }

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

// run runs the script once, bounded by the store's timeout, and returns its
// reply as integers (a single integer reply becomes a one-element slice).
func (s *Redis) run(ctx context.Context, keys []string, args []any) ([]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
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
