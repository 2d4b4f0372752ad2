package caddymodule

import (
	"time"

	"go.uber.org/zap"
)

// drainBound is how long a cleaned-up handler keeps its store for the
// requests it still serves: Caddy does not wait for them at a reload, and
// reverse_proxy waits for an upstream's answer without a bound by
// default.
const drainBound = 5 * time.Minute

// releaseWhenServed gives the store back once the handler serves no
// request, or at deadline. A reload that changes the store's settings
// (its timeout, its address) makes a new store and closes the old one at
// Cleanup; the requests still in the old handler then met a closed store,
// which on_error allow passed uncounted (a probe's 2 gateways reloading
// under load delivered 1,226 of a limit of 1,200), and their refunds were
// lost. Past the deadline the store is closed all the same, and said so:
// a request still deciding then gets on_error, and a refund fails.
func (h *Handler) releaseWhenServed(deadline time.Time) {
	for h.serving.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := h.serving.Load(); n > 0 {
		h.logger.Warn("frequency cap store of an unloaded config closed with requests still in flight: their refunds, if any, fail",
			zap.String("handler", h.Name), zap.Int64("requests", n), zap.Duration("waited", drainBound))
	}
	if err := h.releaseStore(); err != nil {
		h.logger.Warn("frequency cap store released after its requests", zap.Error(err))
	}
}
