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
// slots, and it writes by component, the components that the native write
// does not take (several keys, or a master without SET … IFEQ) each in a
// commit.lua run of its own, since a run's keys must share a slot. A
// component's keys always do: its decisions each have one hash tag (lane
// decisions), and decisions that share a key share its tag.

// slotWrite is one component's commit.lua run on a cluster master, and
// its answer.
type slotWrite struct {
	comp  int32
	names []string
	args  []any
	cmd   *redis.Cmd
}

// splitSlots moves run.names and run.args (commit.lua's keys and values,
// with the components packed last) into one run a component.
func splitSlots(run *decidedInGo) {
	at := map[int32]int{}
	for i, name := range run.names {
		c := run.keyComp[i]
		k, ok := at[c]
		if !ok {
			k = len(run.slotWrites)
			at[c] = k
			run.slotWrites = append(run.slotWrites, slotWrite{comp: c})
		}
		w := &run.slotWrites[k]
		w.names = append(w.names, name)
		w.args = append(w.args, run.args[3*i], run.args[3*i+1], run.args[3*i+2])
	}
	run.names, run.args = nil, nil
}

// queueSlotCommits queues run's commit.lua runs, each sent once.
func queueSlotCommits(ctx context.Context, pipe redis.Pipeliner, run *decidedInGo) {
	for i := range run.slotWrites {
		w := &run.slotWrites[i]
		w.cmd = scriptCmd(ctx, "evalsha", commitScript.Hash(), w.names, w.args)
		_ = pipe.Process(ctx, onceCmd{w.cmd})
	}
}

// slotAnswers reads the answers of run's commit.lua runs, as
// nativeAnswers reads the native writes': a run that found a key changed
// makes it hot and returns its component's calls in again; one the node
// did not run (its slot moved) returns them in redo; any other failure
// fails them (the write may have landed: an over-count, never an
// over-admission). A script the node did not hold is loaded and run again
// here.
func (s *Store) slotAnswers(run *decidedInGo, perr error) (again, redo []*call) {
	if len(run.slotWrites) == 0 {
		return nil, nil
	}
	const (
		written = iota
		changed
		notRun
		failed
	)
	fate := make(map[int32]int, len(run.slotWrites))
	errs := map[int32]error{}
	for i := range run.slotWrites {
		w := &run.slotWrites[i]
		v, err := w.cmd.Result()
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") {
			// The script cache was emptied (a restart, a new master):
			// nothing ran.
			v, err = s.evalScript(run.ctx, lua.Commit, w.names, w.args...).Result()
		}
		if k, ok := v.(int64); ok {
			// Answered, whatever error a failure later in the pipeline
			// stamped on every command.
			if k >= 1 && int(k) <= len(w.names) {
				s.hot.mark(w.names[k-1])
				fate[w.comp] = changed
			}
			continue
		}
		switch {
		case err != nil && notRunHere(err):
			fate[w.comp] = notRun
		default:
			if err == nil {
				err = perr
			}
			if err == nil {
				err = errors.New("commit.lua answered " + strings.TrimSpace(w.cmd.String()))
			}
			fate[w.comp] = failed
			errs[w.comp] = classify(err)
		}
	}
	for i, c := range run.calls {
		switch fate[run.component[i]] {
		case changed:
			again = append(again, c)
		case notRun:
			redo = append(redo, c)
		case failed:
			if c.err == nil {
				c.err = errs[run.component[i]]
			}
		}
	}
	return again, redo
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
