package caddymodule

import (
	"context"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/freqcap/caddy-freqcap/caddymodule/internal/reply"
	"github.com/freqcap/caddy-freqcap/limiter"
)

// quietHit is a quiet rule whose range holds the request: its check (rule,
// values, zone, shadow) and how long until the range ends.
type quietHit struct {
	check limiter.Check
	until time.Duration
}

// decide makes the request's decision. A quiet range that holds the
// request refuses it (unless the request is exempt or the rule a shadow):
// then nothing may be recorded, and the store is only asked what the other
// rules have left, for the answer; if it cannot say, the answer carries the
// quiet rules alone. The quiet rules' answers follow the store's, and their
// checks are appended to req, so that Results and Checks stay parallel.
func (h *Handler) decide(ctx context.Context, req *limiter.Request, quiet []quietHit) (*limiter.Decision, error) {
	refused := false
	if !req.Exempt {
		for i := range quiet {
			refused = refused || !quiet[i].check.Shadow
		}
	}
	var d *limiter.Decision
	if len(req.Checks) > 0 {
		// The store bounds the call by the timeout itself (the memory
		// store never waits on anything).
		start := time.Now()
		var err error
		if refused {
			d, err = h.store.Usage(ctx, req)
		} else {
			d, err = h.store.Decide(ctx, req)
		}
		op := h.metrics.decide
		if refused {
			op = h.metrics.usage // read, not decided: a quiet rule refused it
		}
		op.observe(start, err)
		switch {
		case err == nil && refused:
			h.noteUsage(start, d)
		case err == nil:
			h.noteStore(start, d)
		case !refused:
			h.outage.failed(time.Now(), h.OnError)
			return nil, err
		default:
			// The answer carries the quiet rules alone: drop the checks
			// the store did not answer for, so that Results and Checks
			// stay parallel.
			h.outage.failed(time.Now(), "")
			h.warns.add(opUsage, err)
			d, req.Checks = nil, req.Checks[:0]
		}
	}
	if d == nil {
		d = &limiter.Decision{Allowed: true, Denier: -1, Now: time.Now()}
	}
	addQuiet(req, d, quiet)
	return d, nil
}

// addQuiet appends the quiet rules' answers to d and their checks to req,
// so that Results and Checks stay parallel; a quiet rule that is neither a
// shadow nor waived by exempt denies.
func addQuiet(req *limiter.Request, d *limiter.Decision, quiet []quietHit) {
	for _, q := range quiet {
		waived := q.check.Shadow || req.Exempt
		req.Checks = append(req.Checks, q.check)
		res := limiter.Result{Rule: q.check.Rule, Reset: q.until, Denied: true, Waived: waived}
		if !waived {
			res.RetryAfter = q.until
			d.Allowed = false
			if d.Denier < 0 || q.until > d.RetryAfter {
				d.Denier, d.RetryAfter = len(d.Results), q.until
			}
		}
		d.Results = append(d.Results, res)
	}
}

// noteStore counts which store made a decision asked for at start, and
// notes a local one (the store failed) or the store answering.
func (h *Handler) noteStore(start time.Time, d *limiter.Decision) {
	if d.Fallback == nil {
		h.metrics.byStore.Inc()
		if h.outage.failing() {
			h.outage.answered(start, time.Now())
		}
		return
	}
	h.outage.failed(time.Now(), OnErrorLocal)
	h.metrics.byLocal.Inc()
	h.metrics.decide.errors.Inc()
	h.locals.add(opDecide, d.Fallback)
}

// noteUsage is noteStore for a usage read, which decided nothing: it
// ends an outage, or counts its failure under usage where on_error local
// answered it.
func (h *Handler) noteUsage(start time.Time, d *limiter.Decision) {
	if d.Fallback == nil {
		if h.outage.failing() {
			h.outage.answered(start, time.Now())
		}
		return
	}
	h.outage.failed(time.Now(), "")
	h.metrics.usage.errors.Inc()
	h.locals.add(opUsage, d.Fallback)
}

// logShadows logs at info each shadow rule that would have denied the
// request, had it been live. Dimension values are logged only with
// log_values.
func (h *Handler) logShadows(req *limiter.Request, d *limiter.Decision) {
	if req.Exempt || !d.Allowed {
		// Refused anyway: the shadow rule would have stopped nothing.
		return
	}
	for i := range d.Results {
		res := &d.Results[i]
		if !res.Waived || !res.Denied {
			continue
		}
		ce := h.logger.Check(zapcore.InfoLevel, "shadow rule would deny")
		if ce == nil {
			return
		}
		fields := []zap.Field{zap.String("handler", h.Name), zap.String("rule", res.Rule.Name)}
		if h.LogValues {
			fields = append(fields, zap.Object("values", reply.CheckValues(req.Checks[i:i+1])))
		}
		ce.Write(fields...)
	}
}
