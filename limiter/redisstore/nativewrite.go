package redisstore

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
)

// This file is the native write of decisions made in Go, on a node that has
// SET … IFEQ (see capability.go). commit.lua writes a batch's keys
// all or none, component by component; a component of one key needs no
// script for that: SET key new IFEQ old PX ttl writes it only if it still
// holds what was read, and SET key new NX PX ttl only if it still does not
// exist. Redis then only compares and copies the bytes, which costs about
// what a plain SET does, where the script costs twice as much (every key
// and value becomes a Lua string, and every key is read again).
//
// A component of several keys (one decision over a recipient's key and a
// campaign's, or a batch under BatchAll) keeps commit.lua: SET … IFEQ
// checks one key, and writing one key of a component while another has
// changed would record part of a decision. Both ride in one pipeline: still
// one round trip for the write. A native write that finds its key changed
// sends its component's decisions to the script, as a conflict in
// commit.lua does (the key turns hot, Conflicts counts it).

// nativeKey is one key written natively, and its answer.
type nativeKey struct {
	name  string
	old   argRef // "" when the key did not exist at the read: NX
	value argRef
	ttl   argRef // ms
	comp  int32  // its component (0 when the calls are one whole)
	cmd   *redis.StatusCmd
}

// planNative moves to run.native the keys that are alone in their
// component and written with a TTL. A key alone in its component that
// is only checked (its decisions recorded nothing there) is dropped:
// decisions that read one key and wrote nothing are exact as of the read.
// The rest (several keys a component, deletes) stays in run.names and
// run.args for commit.lua.
func planNative(run *decidedInGo) {
	if !run.perComponent && run.calls[0].op != opDecideAll {
		// Independent decisions (the batcher's): by component, so that a
		// changed key sends only its own decisions to the script.
		run.perComponent = true
		var packed []byte
		run.component, run.keyComp, packed = componentsOf(run.calls, run.b)
		run.args = append(run.args, packed)
	}
	comp := func(i int) int32 {
		if run.perComponent {
			return run.keyComp[i]
		}
		return 0
	}
	size := make(map[int32]int, len(run.names))
	for i := range run.names {
		size[comp(i)]++
	}
	n := 0
	var packed []byte
	for i, name := range run.names {
		c := comp(i)
		old, value, write := run.args[3*i], run.args[3*i+1], run.args[3*i+2]
		what := argText(write) // a TTL, or writeCheck or writeDelete
		if size[c] == 1 && what == writeCheck {
			continue
		}
		if size[c] == 1 && what != writeDelete {
			run.native = append(run.native, nativeKey{name: name, old: old.(argRef), value: value.(argRef), ttl: write.(argRef), comp: c})
			continue
		}
		run.names[n] = name
		run.args[3*n], run.args[3*n+1], run.args[3*n+2] = old, value, write
		if run.perComponent {
			run.keyComp[n] = c
			packed = binary.LittleEndian.AppendUint32(packed, uint32(c))
		}
		n++
	}
	run.names, run.args = run.names[:n], run.args[:3*n]
	if run.perComponent {
		run.keyComp = run.keyComp[:n]
		if n > 0 {
			run.args = append(run.args, packed)
		}
	}
}

// queueNative queues run's native writes in pipe; on a cluster, each sent
// once (see once.go).
func queueNative(ctx context.Context, pipe redis.Pipeliner, run *decidedInGo, cluster bool) {
	for i := range run.native {
		k := &run.native[i]
		if *k.old.s == "" {
			k.cmd = redis.NewStatusCmd(ctx, "set", argRef{&k.name}, k.value, "nx", "px", k.ttl)
		} else {
			k.cmd = redis.NewStatusCmd(ctx, "set", argRef{&k.name}, k.value, "ifeq", k.old, "px", k.ttl)
		}
		_ = pipe.Process(ctx, sent(k.cmd, cluster))
	}
}

// nativeAnswers reads the answers of run's native writes. A key found
// changed (a nil answer) turns hot and its component's calls are returned
// in again, to be decided in the script as after a conflict; a write the
// node did not run (it does not know IFEQ, or the key's slot has moved)
// returns them in redo, for the same; any other failure fails them, as a
// failed write does (it may have landed: an over-count, never an
// over-admission). perr is the pipeline's error.
func (s *Store) nativeAnswers(run *decidedInGo, perr error) (again, redo []*call) {
	if len(run.native) == 0 {
		return nil, nil
	}
	const (
		written = iota
		changed
		notRun
		failed
	)
	fate := make(map[int32]int, len(run.native))
	errs := map[int32]error{}
	for i := range run.native {
		k := &run.native[i]
		err := k.cmd.Err()
		switch {
		case k.cmd.Val() == "OK":
			// Written, whatever error a failure later in the pipeline
			// stamped on every command.
			continue
		case errors.Is(err, redis.Nil):
			s.hot.mark(k.name)
			fate[k.comp] = max(fate[k.comp], changed)
		case err != nil && unknownSyntax(err):
			s.caps.demote(run.lane.node, "SET … IFEQ refused ("+err.Error()+"): the node has no native compare-and-set")
			fate[k.comp] = max(fate[k.comp], notRun)
		case err != nil && notRunHere(err):
			fate[k.comp] = max(fate[k.comp], notRun)
		default:
			if err == nil {
				err = perr
			}
			if err == nil {
				err = fmt.Errorf("SET answered %q", k.cmd.Val())
			}
			fate[k.comp] = failed
			errs[k.comp] = classify(err)
		}
	}
	if len(fate) == 0 {
		return nil, nil
	}
	for i, c := range run.calls {
		comp := int32(0)
		if run.perComponent {
			comp = run.component[i]
		}
		switch fate[comp] {
		case changed:
			again = append(again, c)
		case notRun:
			redo = append(redo, c)
		case failed:
			if c.err == nil {
				c.err = errs[comp]
			}
		}
	}
	return again, redo
}

// inNative reports, for each call of run, whether its component is written
// natively (nil when none is).
func inNative(run *decidedInGo) []bool {
	if len(run.native) == 0 {
		return nil
	}
	comps := make(map[int32]bool, len(run.native))
	for i := range run.native {
		comps[run.native[i].comp] = true
	}
	out := make([]bool, len(run.calls))
	for i := range run.calls {
		comp := int32(0)
		if run.perComponent {
			comp = run.component[i]
		}
		out[i] = comps[comp]
	}
	return out
}

// unknownSyntax reports whether err is a server refusing a command's
// syntax (a SET with IFEQ on a server without it): nothing ran.
func unknownSyntax(err error) bool {
	// HasErrorPrefix reads past the "ERR ".
	return redis.HasErrorPrefix(err, "syntax error") || redis.HasErrorPrefix(err, "unknown ")
}

// notRunHere reports whether err is a cluster node declining a command it
// did not run: a refusal of refusalCodes (the slot is elsewhere or moving,
// the cluster is down, the node is a replica now, or loading), as go-redis
// returns it or as classify wraps it (a write's error is classified when
// it is read, and go-redis's own tests do not see through that), or an
// ACL's NOPERM.
func notRunHere(err error) bool {
	return refusedBeforeRunning(err) || redis.HasErrorPrefix(err, "NOPERM")
}
