package caddymodule

import (
	"sync"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// missingWatch makes a dimension that is never found loud. Under
// on_missing skip a request without a dimension's value passes the
// rules that use it uncapped, which is what skip is for, but a typo in a
// path (`{json.mesage.token}`) does that to every request: a dimension
// missing from every request of a minute, or from each of the first 100
// requests, is a warning naming it and its placeholders, repeated at
// most once a minute while it lasts, and Missing lists it for the
// console. A dimension with alternatives is missing only when none of
// them is found (a batch: when no entry has a value).
//
// The hot path is two atomic adds and an atomic load a request; the
// check itself runs once a minute, and at the 100th request.
type missingWatch struct {
	logger  *zap.Logger
	handler string
	dims    []watchedDim
	period  time.Duration

	requests atomic.Int64
	start    atomic.Int64 // the period's start, Unix nanoseconds

	mu        sync.Mutex
	requests0 int64 // requests at the period's start
	missing   []string

	// fallbacks are the rules' limit and zone placeholders that fall
	// back (fallback_watch.go).
	fallbacks []*watchedFallback
}

type watchedDim struct {
	name, expr string
	watched    bool // a missing value is skipped, not refused
	found      atomic.Int64
	found0     int64 // found at the period's start
	warned     time.Time
}

// firstRequests is how many requests the first check waits for, at
// most: a gateway started with a typo says so before its first minute.
const firstRequests = 100

func newMissingWatch(h *Handler, logger *zap.Logger, now time.Time) *missingWatch {
	w := &missingWatch{logger: logger, handler: h.Name, dims: make([]watchedDim, len(h.dims)), period: time.Minute}
	for i, d := range h.dims {
		w.dims[i] = watchedDim{name: d.Name, expr: d.Expr, watched: !d.Constant && !h.rejectsMissing(i)}
	}
	w.watchFallbacks(h)
	w.start.Store(now.UnixNano())
	return w
}

// found records that a request had dimension di's value.
func (w *missingWatch) found(di int) {
	if w != nil { // nil before Provision
		w.dims[di].found.Add(1)
	}
}

// request records one request whose dimensions were read (after found
// for each found), and checks when the period is over or the first 100
// requests are in.
func (w *missingWatch) request(now time.Time) {
	if w == nil {
		return
	}
	n := w.requests.Add(1)
	if n == firstRequests || now.UnixNano()-w.start.Load() >= int64(w.period) {
		w.check(now, n == firstRequests)
	}
}

// check warns of each watched dimension found in no request since the
// period began, and begins a new period (not at the 100th request, which
// only looks).
func (w *missingWatch) check(now time.Time, first bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !first && now.UnixNano()-w.start.Load() < int64(w.period) {
		return // another request rolled the period over
	}
	requests := w.requests.Load() - w.requests0
	var missing []string
	for i := range w.dims {
		d := &w.dims[i]
		found := d.found.Load()
		if d.watched && requests > 0 && found == d.found0 {
			missing = append(missing, d.name)
			if now.Sub(d.warned) >= w.period {
				d.warned = now
				w.logger.Warn("frequency cap dimension missing from every request: the rules that count by it cap nothing (on_missing skip); check its placeholders",
					zap.String("handler", w.handler), zap.String("dimension", d.name), zap.String("placeholders", d.expr),
					zap.Int64("requests", requests), zap.Duration("since", time.Duration(now.UnixNano()-w.start.Load())))
			}
		}
		if !first {
			d.found0 = found
		}
	}
	w.missing = missing
	w.checkFallbacks(now)
	if !first {
		w.requests0 = w.requests.Load()
		w.start.Store(now.UnixNano())
	}
}

// compileAndWatch compiles the handler and starts watching its
// dimensions for values never found.
func (h *Handler) compileAndWatch() error {
	if err := h.compile(); err != nil {
		return err
	}
	h.watch = newMissingWatch(h, h.logger, time.Now())
	return nil
}

// Missing lists the dimensions the last check found in no request.
func (w *missingWatch) Missing() []string {
	if w == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]string(nil), w.missing...)
}
