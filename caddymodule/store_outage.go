package caddymodule

import (
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// storeOutage notes when a cap set's store starts failing and how
// on_error decided meanwhile, and logs one line when the store answers
// again: how long it failed and how many decisions on_error took, so an
// operator reading the log after an incident sees what it cost without
// adding up the failure lines. Its methods take the time as an argument.
//
// A store that flaps (connections cut every few milliseconds) ends many
// outages a second: their lines are held to one an interval, the outages
// in it summed, like the failure lines (storeWarnings).
//
// The store answering is the hot path: answered costs one atomic load
// while nothing failed. It is safe for concurrent use; a failure that
// races with the recovery may be counted in the next outage instead.
type storeOutage struct {
	logger  *zap.Logger
	handler string
	// interval is the least time between two lines; 0 logs each outage.
	interval time.Duration

	// since is the first failure's time (Unix nanoseconds) while the
	// store fails, 0 while it answers.
	since atomic.Int64
	// allowed, denied and local count the decisions on_error took since.
	allowed, denied, local atomic.Int64
	// warnings are the failure lines of the same store, drained before
	// the outage's line so that it comes last.
	warnings []*storeWarnings

	mu    sync.Mutex
	timer *time.Timer // set while an interval since the last line runs
	held  outageTally // the outages ended and not yet logged
}

// outageTally sums outages for one line.
type outageTally struct {
	outages                int64
	failedFor              time.Duration
	allowed, denied, local int64
}

// failed notes a store failure seen at now, and the decision on_error
// took for it: OnErrorAllow, OnErrorDeny, OnErrorLocal, or "" for a
// failure that decided nothing (a quiet rule's answer stood without the
// store's).
func (o *storeOutage) failed(now time.Time, onError string) {
	if o == nil {
		return
	}
	if o.since.Load() == 0 {
		o.since.CompareAndSwap(0, continuedSince(o.handler, now))
	}
	switch onError {
	case OnErrorAllow:
		o.allowed.Add(1)
	case OnErrorDeny:
		o.denied.Add(1)
	case OnErrorLocal:
		o.local.Add(1)
	}
}

// failing reports whether an outage is open: the store's answers call
// answered only then, so that an answering store costs one atomic load a
// decision, not a clock read too.
func (o *storeOutage) failing() bool { return o != nil && o.since.Load() != 0 }

// answered notes that the store answered, at end, a call made at start.
// The first answer to a call made after the first failure was seen ends
// the outage: an answer to a call made before it says nothing of the
// store since (a call in flight when one connection broke), and would
// give the outage a negative length.
func (o *storeOutage) answered(start, end time.Time) {
	if o == nil {
		return
	}
	since := o.since.Load()
	if since == 0 || start.UnixNano() < since || !o.since.CompareAndSwap(since, 0) {
		return
	}
	// An unloaded config's outage unloaded while this one ran is this
	// one (Caddy loads the new config before it unloads the old).
	if v, ok := openOutages.Load(o.handler); ok {
		if u := v.(unloadedOutage); u.unloaded >= since && u.unloaded <= end.UnixNano() {
			openOutages.Delete(o.handler)
			since = min(since, u.since)
		}
	}
	// At least 0 when the wall clock steps back (since has no monotonic
	// reading).
	t := outageTally{outages: 1, failedFor: max(0, end.Sub(time.Unix(0, since))),
		allowed: o.allowed.Swap(0), denied: o.denied.Swap(0), local: o.local.Swap(0)}
	if o.logger == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.held.outages += t.outages
	o.held.failedFor += t.failedFor
	o.held.allowed += t.allowed
	o.held.denied += t.denied
	o.held.local += t.local
	if o.timer == nil {
		o.write()
	}
}

// flush ends an interval: it logs the outages that ended in it, once the
// store answers (while it fails again, they wait for that outage's end).
func (o *storeOutage) flush() {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.held.outages == 0 {
		o.timer = nil
		return
	}
	if o.since.Load() != 0 {
		o.timer = time.AfterFunc(o.interval, o.flush)
		return
	}
	o.write()
}

// stop logs the outages held, and one still open as still failing, and
// ends the intervals; it runs at Cleanup, at now. A reload's new config
// counts an outage that goes on afresh, its line covering only what came
// after: without this line what on_error decided before the reload was
// never logged.
func (o *storeOutage) stop(now time.Time) {
	if o == nil {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.held.outages > 0 {
		o.write()
	}
	if o.timer != nil {
		o.timer.Stop()
		o.timer = nil
	}
	since := o.since.Swap(0)
	if since == 0 || o.logger == nil {
		return
	}
	openOutages.Store(o.handler, unloadedOutage{since: since, unloaded: now.UnixNano()})
	for _, w := range o.warnings {
		w.drain()
	}
	o.logger.Warn("frequency cap store still failing as its config is unloaded (a reload or a stop): what on_error decided so far; after a reload, the new config's line covers the rest",
		zap.String("handler", o.handler),
		zap.Duration("failed_for", max(0, now.Sub(time.Unix(0, since)))),
		zap.Int64("on_error_allowed", o.allowed.Swap(0)),
		zap.Int64("on_error_denied", o.denied.Swap(0)),
		zap.Int64("on_error_local", o.local.Swap(0)))
}

// write logs the outages held and starts an interval; under mu. The
// failure lines go first, so that the store answering is the last line.
func (o *storeOutage) write() {
	for _, w := range o.warnings {
		w.drain()
	}
	t := o.held
	o.held = outageTally{}
	fields := []zap.Field{
		zap.String("handler", o.handler),
		zap.Duration("failed_for", t.failedFor),
		zap.Int64("on_error_allowed", t.allowed),
		zap.Int64("on_error_denied", t.denied),
		zap.Int64("on_error_local", t.local),
	}
	if t.outages > 1 {
		fields = append(fields, zap.Int64("outages", t.outages))
	}
	o.logger.Info("frequency cap store answers again", fields...)
	if o.interval > 0 {
		o.timer = time.AfterFunc(o.interval, o.flush)
	}
}

// openOutages are the outages of unloaded configs still open at their
// unload, by cap set name: the next config of the cap set that fails
// within continueOutage of the unload takes the outage's start, so that
// its "answers again" line says how long the store failed, not its own
// share (a probe's 6 s outage across 24 reloads read 0.5 s).
var openOutages sync.Map

type unloadedOutage struct{ since, unloaded int64 }

// continueOutage is how soon after an unload a failure continues the
// unloaded config's outage rather than starting one.
const continueOutage = 10 * time.Second

// continuedSince is the start of the outage a failure at now begins for
// cap set handler: an unloaded config's, continued, or now.
func continuedSince(handler string, now time.Time) int64 {
	if v, ok := openOutages.LoadAndDelete(handler); ok {
		u := v.(unloadedOutage)
		if d := now.UnixNano() - u.unloaded; d >= 0 && d <= int64(continueOutage) {
			return u.since
		}
	}
	return now.UnixNano()
}
