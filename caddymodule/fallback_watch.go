package caddymodule

import (
	"strconv"
	"sync/atomic"
	"time"

	"go.uber.org/zap"
)

// A rule's limit or zone read from a placeholder falls back, by design,
// when a request gives no usable value (`limit {tier_day} 50`: a tier the
// map does not name; `calendar day {json.tz} Asia/Shanghai`: no tz). A
// typo in the placeholder (`{tier_dya}`, `{json.tzz}`) makes every request
// fall back, silently: free-tier senders got 50 where 2 was meant. So the
// missing watch (missing_watch.go) also warns of a rule's limit or zone
// placeholder that has given no usable value in any request it was read
// for since the config loaded: at its first check (the 100th request, or
// a minute), then once an hour while it lasts. One usable value ends it:
// a placeholder that falls back for most requests is what a fallback is
// for.

// watchedFallback is one rule's limit or zone placeholder.
type watchedFallback struct {
	rule, of, expr, fallback string
	read, given              atomic.Int64
	warned                   time.Time
}

// fallbackWarnEvery is how often a placeholder that never gave a value is
// warned of again.
const fallbackWarnEvery = time.Hour

// watchFallbacks lists h's limit and zone placeholders that fall back,
// and notes in each rule where its own are.
func (w *missingWatch) watchFallbacks(h *Handler) {
	for i := range h.rules {
		cr := &h.rules[i]
		cr.limitWatch, cr.zoneWatch = -1, -1
		if cr.limitExpr != "" && cr.limitFallback > 0 {
			cr.limitWatch = len(w.fallbacks)
			w.fallbacks = append(w.fallbacks, &watchedFallback{rule: cr.rule.Name, of: "limit", expr: cr.limitExpr, fallback: strconv.FormatInt(cr.limitFallback, 10)})
		}
		if cr.zoneExpr != "" {
			fallback := "UTC"
			if z := cr.rule.Window.Zone; z != nil {
				fallback = z.String()
			} else if q := cr.rule.Quiet; q != nil && q.Zone != nil {
				fallback = q.Zone.String()
			}
			cr.zoneWatch = len(w.fallbacks)
			w.fallbacks = append(w.fallbacks, &watchedFallback{rule: cr.rule.Name, of: "zone", expr: cr.zoneExpr, fallback: fallback})
		}
	}
}

// readFallback records that placeholder fi (a rule's limitWatch or
// zoneWatch; -1: none) was read for a request or entry, and whether it
// gave a usable value.
func (w *missingWatch) readFallback(fi int, given bool) {
	if w == nil || fi < 0 {
		return
	}
	f := w.fallbacks[fi]
	f.read.Add(1)
	if given {
		f.given.Add(1)
	}
}

// checkFallbacks warns of each placeholder read and never usable since
// the config loaded; w.mu is held.
func (w *missingWatch) checkFallbacks(now time.Time) {
	for _, f := range w.fallbacks {
		read := f.read.Load()
		if read == 0 || f.given.Load() > 0 || now.Sub(f.warned) < fallbackWarnEvery {
			continue
		}
		f.warned = now
		w.logger.Warn("frequency cap "+f.of+" placeholder has given no usable value in any request: each used the fallback; check its placeholder",
			zap.String("handler", w.handler), zap.String("rule", f.rule), zap.String("placeholder", f.expr), zap.String("fallback", f.fallback),
			zap.Int64("requests", read))
	}
}
