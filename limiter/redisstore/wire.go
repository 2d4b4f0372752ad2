package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"
	"github.com/freqcap/caddy-freqcap/lua"
)

// This file is the wire format of lua/freqcap.lua: the KEYS and ARGV of a
// run, and its reply (the script's header is the contract). The constants
// shared with the scripts carry the same names there, in upper case (opDecide
// is OP_DECIDE); TestWireConstantsMatchLua holds the two sides equal.

// The operations of freqcap.lua, its ARGV[1].
const (
	opDecide    = "d" // decide and record
	opDecideAll = "a" // decide; record only if the whole run is admitted
	opPeek      = "p" // decide, record nothing (Usage)
	opRefund    = "r" // give back recorded admissions
	opReset     = "x" // forget every record of some sub-logs
)

// decisionExempt is the flag of an exempt decision in freqcap.lua's
// decisions: its records are marked exempt.
const decisionExempt = 1

// clockSkew starts the error freqcap.lua raises when now is outside the
// calendar periods it was sent (see classify).
const clockSkew = "CLOCKSKEW"

var freqcapScript = redis.NewScript(lua.Freqcap)

// replyLen is the length of a call's part of a decide or peek reply.
func (c *call) replyLen() int {
	n := 2 + len(c.secs)
	for _, si := range c.secs {
		n += 3 * (c.p.Sections[si].R1 - c.p.Sections[si].R0)
	}
	return n
}

// unpackReply puts the call's part of the reply into p: each section's
// record time, and each rule's answer in p.raw.
func (c *call) unpackReply(p *limiter.Plan) {
	k := 1 + len(c.secs)
	for i, si := range c.secs {
		sec := &p.Sections[si]
		sec.Recorded = c.reply[1+i]
		for ri := sec.R0; ri < sec.R1; ri++ {
			p.Raw[ri] = recordlog.RawResult{Used: c.reply[k], Reset: c.reply[k+1], Retry: c.reply[k+2], Ok: c.reply[k+2] == 0}
			k += 3
		}
	}
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
func (ra *runArgs) specOf(p *limiter.Plan, sec *limiter.Section) int {
	b := ra.spec[:0]
	b = recordlog.AppendUint(b, uint64(sec.Retention), 6)
	b = recordlog.AppendUint(b, uint64(sec.Grain), 6)
	b = append(b, byte(sec.R1-sec.R0))
	for _, r := range p.Rules[sec.R0:sec.R1] {
		b = recordlog.AppendUint(b, uint64(r.Limit), 6)
		b = recordlog.AppendUint(b, uint64(r.Window), 6)
		if r.Window == 0 {
			for _, x := range r.Bounds {
				b = recordlog.AppendUint(b, uint64(x), 6)
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
	ra.decs = recordlog.AppendUint(ra.decs, uint64(c.now), 6)
	var flags byte
	if c.p.Exempt {
		flags |= decisionExempt
	}
	ra.decs = append(ra.decs, byte(len(c.secs)), flags)
	for _, si := range c.secs {
		sec := &c.p.Sections[si]
		ra.decs = recordlog.AppendUint(ra.decs, uint64(ra.key(c.p.Key(sec))), 2)
		ra.decs = recordlog.AppendUint(ra.decs, uint64(ra.specOf(c.p, sec)), 2)
		ra.decs = recordlog.AppendUint(ra.decs, uint64(sec.Cost), 6)
		ra.ids = append(ra.ids, string(c.p.Sub(sec)))
	}
}

// refundArgs is the KEYS and ARGV of a refund of recs[i] for i in group.
func refundArgs(recs []recordlog.Recorded, group []int, nowArg int64) (keyList, []any) {
	var keys keyList
	args := []any{opRefund, nowArg, len(group)}
	for _, ri := range group {
		r := &recs[ri]
		args = append(args, keys.index(r.Key), r.Sub, r.Grain, r.T, r.C)
	}
	return keys, args
}

// resetArgs is the KEYS and ARGV of a reset of p's sections in group.
func resetArgs(p *limiter.Plan, group []int, nowArg, keep int64) (keyList, []any) {
	var keys keyList
	args := []any{opReset, nowArg, len(group)}
	for _, si := range group {
		sec := &p.Sections[si]
		args = append(args, keys.index(string(p.Key(sec))), string(p.Sub(sec)), keep)
	}
	return keys, args
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

// maxRunKeys is the most keys one script run indexes (a key's index is an
// I2 in the decisions ARGV).
const maxRunKeys = 65535

// runCalls runs calls of one op in one script run and hands each its part
// of the reply.
func (s *Store) runCalls(ctx context.Context, calls []*call) {
	keys, args, ok := runArgsOf(calls)
	if !ok {
		// Too many specs or keys for one run: run in two halves (a
		// decision alone has at most 255 sections). Each half records
		// what it admits (OP_DECIDE): under OP_DECIDE_ALL a half with no
		// denial would record itself whatever the other half found, and
		// its records would be taken for unwritten. The caller's
		// rollback takes back what a denied batch recorded.
		for _, c := range calls {
			c.op = opDecide
		}
		s.runCalls(ctx, calls[:len(calls)/2])
		s.runCalls(ctx, calls[len(calls)/2:])
		return
	}
	rep, err := s.run(ctx, keys, args)
	hand(calls, rep, err)
}

// runArgsOf builds the KEYS and ARGV of one run deciding calls, which share
// one op. ok is false when they need more rule specs (255) or keys (65,535:
// the script reads a key's index in two bytes) than a run carries, and
// must be split.
func runArgsOf(calls []*call) (keys []string, args []any, ok bool) {
	ra := newRunArgs(len(calls))
	for i, c := range calls {
		ra.add(c)
		if (ra.nspecs > 255 || len(ra.keys) > maxRunKeys) && i > 0 {
			return nil, nil, false
		}
	}
	ra.specs[0] = byte(ra.nspecs)
	ra.decs[0], ra.decs[1] = byte(len(calls)), byte(len(calls)>>8)
	args = make([]any, 0, 3+len(ra.ids))
	args = append(args, calls[0].op, ra.specs, ra.decs)
	args = append(args, ra.ids...)
	return ra.keys, args, true
}

// hand gives each of calls its part of a run's reply (or the run's error).
func hand(calls []*call, rep []int64, err error) {
	k := 0
	for _, c := range calls {
		switch n := c.replyLen(); {
		case err != nil:
			c.err = err
		case k+n > len(rep):
			c.err = fmt.Errorf("%w: short reply from script", limiter.ErrStore)
		default:
			c.at, c.reply = rep[k], rep[k+1:k+n:k+n] // appends must not reach the next call's part
			k += n
		}
	}
}

func (s *Store) runBounded(ctx context.Context, keys []string, args []any) ([]int64, error) {
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	return s.run(ctx, keys, args)
}

// run runs the script and returns its reply as integers (a single
// integer reply becomes a one-element slice). A run that Redis refused
// before running it is tried again within ctx's deadline (see
// refusals.go).
func (s *Store) run(ctx context.Context, keys []string, args []any) ([]int64, error) {
	r := refusalRetry{s: s, ctx: ctx}
	for {
		v, err := s.runScript(ctx, freqcapScript.Hash(), lua.Freqcap, keys, args...).Result()
		if err == nil {
			return scriptInts(v)
		}
		if !r.again(err) {
			return nil, classify(err)
		}
	}
}

// scriptInts reads a script's reply as integers (a single integer reply
// becomes a one-element slice).
func scriptInts(v any) ([]int64, error) {
	switch v := v.(type) {
	case int64:
		return []int64{v}, nil
	case []any:
		out := make([]int64, len(v))
		for i, x := range v {
			n, ok := x.(int64)
			if !ok {
				return nil, fmt.Errorf("%w: unexpected script reply element %T", limiter.ErrStore, x)
			}
			out[i] = n
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: unexpected script reply %T", limiter.ErrStore, v)
}
