package redisstore

import (
	"context"
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/lua"
)

// This file is what a cluster master's lane does differently from the
// one lane off a cluster: it reads a GET a key, since an MGET cannot span
// slots, and what the native write does not take (components of several
// keys, or every component on a master without SET … IFEQ) it writes in
// one commit_node.lua run for the whole master, which declares one key
// and reaches the others by name (see the script's header). A run that
// meets a key the master does not serve stops at its reads, having
// written nothing, and its decisions go to freqcap.lua.

var commitNodeScript = redis.NewScript(lua.CommitNode)

// commitRun is the write of what the native write does not take: KEYS
// and ARGV of commit.lua off a cluster, of commit_node.lua on one.
func (run *decidedInGo) commitRun() (src, hash string, keys []string, args []any) {
	if !run.lane.cluster {
		return lua.Commit, commitScript.Hash(), run.names, run.args
	}
	n := len(run.names)
	args = make([]any, 0, 2+4*n)
	args = append(args, n)
	for i := range run.names {
		args = append(args, argRef{&run.names[i]})
	}
	args = append(args, run.args...) // the values by key, then the components
	return lua.CommitNode, commitNodeScript.Hash(), run.names[:1], args
}

// queueCommit queues run's commit run in pipe, when it has one; on a
// cluster, sent once (see once.go).
func queueCommit(ctx context.Context, pipe redis.Pipeliner, run *decidedInGo) *redis.Cmd {
	if len(run.names) == 0 {
		return nil
	}
	_, hash, keys, args := run.commitRun()
	cmd := scriptCmd(ctx, "evalsha", hash, keys, args)
	_ = pipe.Process(ctx, sent(cmd, run.lane.cluster))
	return cmd
}

// notOnThisMaster reports whether err is a cluster master declining a
// commit_node.lua run it did not write anything of: the declared key is
// elsewhere (notRunHere), or a key it reached is not served here (the
// script stops at its reads).
func notOnThisMaster(err error) bool {
	if notRunHere(err) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "non local key") || strings.Contains(msg, "hash to the same slot")
}

// decodeGets reads a cluster round's answers for run: the master's TIME
// (when asked for) and each key's GET. The calls that read a key whose
// slot the master no longer serves are taken out of run and decided in
// the script at once, where the cluster client follows the slot.
func (l *lane) decodeGets(run *decidedInGo, tm *redis.TimeCmd, gets []*redis.StringCmd, perr error) (int64, error) {
	var now int64
	if tm != nil {
		if err := answered(tm, !tm.Val().IsZero(), perr); err != nil {
			return 0, err
		}
		now = tm.Val().UnixMilli()
	}
	var moved map[string]bool
	for i, g := range gets {
		v, err := g.Result()
		switch {
		case err == nil:
			run.b.keys[i].load(v)
		case errors.Is(err, redis.Nil):
		case notRunHere(err):
			if moved == nil {
				moved = map[string]bool{}
			}
			moved[run.b.keys[i].name] = true
		default:
			return 0, answered(g, false, err)
		}
	}
	if len(moved) == 0 {
		return now, nil
	}
	var kept, elsewhere []*call
	for _, c := range run.calls {
		away := false
		for si := range c.p.Sections {
			away = away || moved[string(c.p.Key(&c.p.Sections[si]))]
		}
		if away {
			elsewhere = append(elsewhere, c)
		} else {
			kept = append(kept, c)
		}
	}
	l.s.scriptAgain(run.ctx, elsewhere)
	finish(elsewhere)
	run.calls = kept
	return now, nil
}
