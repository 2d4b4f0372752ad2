package redisstore

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// This file tries script runs again, within the caller's deadline, when
// Redis refused them before running them. While a cluster's slots move
// (a reshard, a master added or removed, a failover) a node may answer a
// command for a slot it does not serve, or not yet, with MOVED or ASK
// (go-redis follows those, up to its redirect limit), TRYAGAIN (a command
// on several keys of a slot whose keys are half moved), or CLUSTERDOWN
// "Hash slot not served" (a node that knows no owner of the slot: one
// just added, or one removed and reset that a client still takes for the
// owner); failovers and restarts add READONLY, MASTERDOWN and LOADING.
// Each is a refusal before the command runs: nothing was read or written,
// so running it again cannot record anything twice.
//
// go-redis retries some of these itself, but always on the node its slot
// map names, with back-offs of tens of milliseconds; and a node that was
// removed answers CLUSTERDOWN, not MOVED, so nothing tells go-redis that
// its map is stale until its periodic reload a minute later. So after a
// refusal the store asks the client to reload its slot map, pauses
// briefly, and tries again, for as long as the deadline leaves room for
// another attempt. A timeout, a broken connection or a script error is
// never tried again: the script may have run (and go-redis never re-sends
// it either: see once.go).

// refusalCodes are the error codes of refusals made before a command runs.
// READONLY also ends a script whose first write meets a replica: the
// script had only read, so running it again is as safe.
var refusalCodes = [...]string{"MOVED ", "ASK ", "TRYAGAIN ", "CLUSTERDOWN ", "LOADING ", "MASTERDOWN ", "READONLY "}

// refusedBeforeRunning reports whether err, as go-redis returns it or as
// classify wraps it, is a refusal of refusalCodes.
func refusedBeforeRunning(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	for _, code := range refusalCodes {
		if strings.HasPrefix(msg, code) || strings.Contains(msg, ": "+code) {
			return true
		}
	}
	return false
}

const (
	// refusalPauseMax bounds the pause between two attempts: a slot's
	// move under redis-cli takes about a millisecond, a client's reload
	// of its slot map one round trip.
	refusalPauseMax = 10 * time.Millisecond
	// refusalAttemptMin is the least time left before the deadline that
	// is worth another attempt.
	refusalAttemptMin = 2 * time.Millisecond
	// refusalAttemptsMax bounds the attempts of a call without a
	// deadline (every call of the store has one).
	refusalAttemptsMax = 8
)

// refusalRetry paces the attempts of one call to Redis.
type refusalRetry struct {
	s        *Store
	ctx      context.Context
	attempts int
}

// again reports whether a call that failed with err should be tried
// again: err is a refusal, and the deadline leaves time for a pause and
// another attempt. Before it reports true it has asked a cluster client to
// reload its slot map and paused: 1, 2, 4, 8, then 10 ms.
func (r *refusalRetry) again(err error) bool {
	if !refusedBeforeRunning(err) {
		return false
	}
	pause := min(time.Millisecond<<min(r.attempts, 4), refusalPauseMax)
	r.attempts++
	if deadline, ok := r.ctx.Deadline(); ok {
		if time.Until(deadline) < pause+refusalAttemptMin {
			return false
		}
	} else if r.attempts > refusalAttemptsMax {
		return false
	}
	r.s.reloadSlots()
	t := time.NewTimer(pause)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-r.ctx.Done():
		return false
	}
}

// followFailover has a cluster client read its slot map again after a
// call that timed out or found no connection: a master that stopped
// answering (frozen, or gone) may have been replaced by its replica, which
// answers no MOVED to tell go-redis so; until its periodic reload, every
// decision about that master's keys failed, for up to a minute after the
// promotion (a probe's gateways with a leased budget there failed every
// send for 57 s). It asks at most once every failoverReloadEvery: go-redis
// paces its reloads only after one that succeeds, so with every node
// down each failing call would start another.
func (s *Store) followFailover(err error) {
	if err == nil || !s.cluster || !(errors.Is(err, limiter.ErrTimeout) || Reason(err) == ReasonUnreachable) {
		return
	}
	now, last := time.Now().UnixNano(), s.reloadedAt.Load()
	if now-last < int64(failoverReloadEvery) || !s.reloadedAt.CompareAndSwap(last, now) {
		return
	}
	s.reloadSlots()
}

// failoverReloadEvery paces followFailover: a few reads of the slot map a
// second a gateway, while calls fail.
const failoverReloadEvery = 200 * time.Millisecond

// reloadSlots asks a cluster client to read the slot map again, in the
// background (go-redis coalesces concurrent requests); other clients have
// no map.
func (s *Store) reloadSlots() {
	if c, ok := s.client.(interface{ ReloadState(context.Context) }); ok {
		c.ReloadState(context.Background())
	}
}

// runAll runs the scripts as runAllOnce does, then runs again, together,
// those that Redis refused before running them, for as long as their
// deadline allows (see refusalRetry).
func (s *Store) runAll(ctx context.Context, runs []scriptRun) {
	s.runAllOnce(ctx, runs)
	r := refusalRetry{s: s, ctx: ctx}
	for {
		var idx []int
		for i := range runs {
			if refusedBeforeRunning(runs[i].err) {
				idx = append(idx, i)
			}
		}
		if len(idx) == 0 || !r.again(runs[idx[0]].err) {
			return
		}
		again := make([]scriptRun, len(idx))
		for k, i := range idx {
			again[k] = scriptRun{keys: runs[i].keys, args: runs[i].args}
		}
		s.runAllOnce(ctx, again)
		for k, i := range idx {
			runs[i].rep, runs[i].err = again[k].rep, again[k].err
		}
	}
}
