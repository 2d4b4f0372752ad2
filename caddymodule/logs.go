package caddymodule

import (
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/freqcap/caddy-freqcap/caddymodule/internal/reply"
	"github.com/freqcap/caddy-freqcap/internal/jsonbatch"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/redisstore"
)

// warnInterval is how often, at most, a failing store is logged.
const warnInterval = time.Second

// checkDenial is the entry for a denial's log line: at debug with msg, or
// under dry_run, where nothing else would show the denial, at info with
// dryMsg. It is nil when that level is off.
func (h *Handler) checkDenial(msg, dryMsg string) *zapcore.CheckedEntry {
	if h.DryRun {
		return h.logger.Check(zapcore.InfoLevel, dryMsg)
	}
	return h.logger.Check(zapcore.DebugLevel, msg)
}

// logDenial logs a denial at debug, or, under dry_run, a denial that did
// not happen at info: nothing else would show it. Dimension values are
// logged only with log_values.
func (h *Handler) logDenial(req *limiter.Request, d *limiter.Decision) {
	ce := h.checkDenial("denied", "dry run: would deny")
	if ce == nil {
		return
	}
	fields := []zap.Field{
		zap.String("handler", h.Name),
		zap.String("rule", d.Results[d.Denier].Rule.Name),
		zap.Duration("retry_after", d.RetryAfter),
	}
	var others []string
	for i := range d.Results {
		// A shadow rule's would-be denial (Waived) has its own line.
		if res := &d.Results[i]; res.Denied && !res.Waived && i != d.Denier {
			others = append(others, d.Results[i].Rule.Name)
		}
	}
	if len(others) > 0 {
		fields = append(fields, zap.Strings("also_denied_by", others))
	}
	if h.LogValues {
		fields = append(fields, zap.Object("values", reply.CheckValues(req.Checks)))
	}
	ce.Write(fields...)
}

// storeWarnings logs store failures at warn without flooding the log
// during an outage: the first failure after a quiet interval is logged at
// once, then at most one line per interval says how many failed in it.
// A final line follows the last interval that saw failures, so every
// failure is counted in some line.
type storeWarnings struct {
	// msg is the line's message; "" is "frequency cap store failing".
	msg      string
	logger   *zap.Logger
	handler  string
	onError  string
	interval time.Duration
	// reasons counts every failure by reason (store_reasons.go).
	reasons reasonCounters
	// refusals, when set, logs the failures that are refusals instead
	// (store_refusals.go): they last until someone acts.
	refusals *refusalLog

	mu      sync.Mutex
	timer   *time.Timer // set while an interval is running
	pending int64       // failures since the last line
	ops     opCounts    // of pending, by store operation
	lastErr error
}

// opCounts counts failures by store operation, in the order ops lists.
type opCounts [len(ops)]int64

// ops are the store operations, in the order a line names them.
var ops = [...]string{opDecide, opRefund, opUsage, opReset}

func (c *opCounts) add(op string) {
	for i, o := range ops {
		if o == op {
			c[i]++
			return
		}
	}
}

// fields are a line's op (the operations that failed, comma-separated)
// and, when more than one did, failures_by_op: a probe saw 5 decisions
// and a usage fail in one second logged as 6 usage failures.
func (c *opCounts) fields() []zap.Field {
	var names []string
	by := map[string]int64{}
	for i, n := range c {
		if n > 0 {
			names = append(names, ops[i])
			by[ops[i]] = n
		}
	}
	f := []zap.Field{zap.String("op", strings.Join(names, ","))}
	if len(names) > 1 {
		f = append(f, zap.Any("failures_by_op", by))
	}
	return f
}

// add notes one failure of the store operation op, now.
func (w *storeWarnings) add(op string, err error) { w.addAt(time.Now(), op, err) }

// addAt notes one failure of the store operation op at now.
func (w *storeWarnings) addAt(now time.Time, op string, err error) {
	w.reasons.count(err)
	if w.refusals != nil && redisstore.IsRefusal(err) {
		w.refusals.add(now, op, err)
		return
	}
	w.mu.Lock()
	if w.timer != nil {
		w.pending++
		w.ops.add(op)
		w.lastErr = err
		w.mu.Unlock()
		return
	}
	w.timer = time.AfterFunc(w.interval, w.flush)
	var one opCounts
	one.add(op)
	w.write(1, &one, err) // under the lock, as flush writes
	w.mu.Unlock()
}

// flush ends an interval: it logs the failures the interval saw, and
// starts another if there were any.
func (w *storeWarnings) flush() {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, byOp, err := w.take()
	if n == 0 {
		w.timer = nil
		return
	}
	w.timer = time.AfterFunc(w.interval, w.flush)
	// Written under the lock, so that drain cannot slip the store's
	// "answers again" in between taking these failures and logging them.
	w.write(n, &byOp, err)
}

// drain logs what is pending now, ahead of its interval's end: the line
// saying the store answers again must come after the last failures', or
// an outage's last line would be a warning. The interval runs out by
// itself, finding nothing pending.
func (w *storeWarnings) drain() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if n, byOp, err := w.take(); n > 0 {
		w.write(n, &byOp, err)
	}
}

// take returns the failures pending and forgets them; under mu.
func (w *storeWarnings) take() (int64, opCounts, error) {
	n, byOp, err := w.pending, w.ops, w.lastErr
	w.pending, w.ops, w.lastErr = 0, opCounts{}, nil
	return n, byOp, err
}

// stop logs what is pending and ends the intervals; it runs at Cleanup.
func (w *storeWarnings) stop() {
	w.mu.Lock()
	n, byOp, err := w.take()
	if w.timer != nil {
		w.timer.Stop()
	}
	// A flush already running may start one more interval; it ends by
	// itself, finding nothing pending.
	w.timer = nil
	w.mu.Unlock()
	if n > 0 {
		w.write(n, &byOp, err)
	}
}

func (w *storeWarnings) write(n int64, byOp *opCounts, err error) {
	if w.logger == nil {
		return
	}
	msg := w.msg
	if msg == "" {
		msg = "frequency cap store failing"
	}
	fields := append([]zap.Field{
		zap.String("handler", w.handler),
		zap.Int64("failures", n),
		zap.Duration("interval", w.interval)},
		byOp.fields()...)
	w.logger.Warn(msg, append(fields,
		zap.String("on_error", w.onError),
		zap.String("reason", redisstore.Reason(err)),
		zap.Error(err))...)
}

// logBatchDenial logs a batch with denied entries in one line, at debug
// (info under dry_run, where nothing else would show the denials): the
// worst denial's rule and wait, and each denied entry's path and rule;
// values only with log_values.
func (h *Handler) logBatchDenial(b *jsonbatch.Batch, reqs []limiter.Request, ds []*limiter.Decision, denied []int) {
	ce := h.checkDenial("batch entries denied", "dry run: would deny batch entries")
	if ce == nil {
		return
	}
	worst := ds[worstDenied(ds)]
	ce.Write(
		zap.String("handler", h.Name),
		zap.String("rule", worst.Results[worst.Denier].Rule.Name),
		zap.Duration("retry_after", worst.RetryAfter),
		zap.Int("entries", len(ds)),
		zap.Array("denied", deniedLog{h: h, b: b, reqs: reqs, ds: ds, denied: denied}),
	)
}

// deniedLog is a batch's denied entries, as a log array.
type deniedLog struct {
	h      *Handler
	b      *jsonbatch.Batch
	reqs   []limiter.Request
	ds     []*limiter.Decision
	denied []int
}

// MarshalLogArray implements zapcore.ArrayMarshaler.
func (l deniedLog) MarshalLogArray(enc zapcore.ArrayEncoder) error {
	for _, i := range l.denied {
		err := enc.AppendObject(zapcore.ObjectMarshalerFunc(func(o zapcore.ObjectEncoder) error {
			d := l.ds[i]
			o.AddString("path", l.b.EntryPath(i))
			o.AddString("rule", d.Results[d.Denier].Rule.Name)
			if l.h.LogValues {
				return o.AddObject("values", reply.CheckValues(l.reqs[i].Checks))
			}
			return nil
		}))
		if err != nil {
			return err
		}
	}
	return nil
}
