package caddymodule

import (
	"context"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// decideBatch decides every entry in one store call (Store.DecideBatch)
// and returns one Decision per entry, in order, each with its quiet
// rules' answers after the store's (as decide does for a single send).
//
// An entry that a quiet range refuses (and is not exempt) is not sent to
// the store, so nothing is recorded for it; under BatchAll such an entry
// refuses the whole batch, so the store is not asked at all. An entry
// whose every rule was left out (on_missing skip) is not sent either and
// is admitted. The checks of an entry the store did not decide are
// dropped, so that Results and Checks stay parallel.
func (h *Handler) decideBatch(ctx context.Context, entries []batchEntry, mode limiter.BatchMode) ([]*limiter.Decision, error) {
	refused := make([]bool, len(entries))
	anyRefused := false
	for i := range entries {
		e := &entries[i]
		if e.req.Exempt {
			continue
		}
		for _, q := range e.quiet {
			if !q.check.Shadow {
				refused[i], anyRefused = true, true
			}
		}
	}
	ds := make([]*limiter.Decision, len(entries))
	if mode != limiter.BatchAll || !anyRefused {
		reqs := make([]limiter.Request, 0, len(entries))
		at := make([]int, 0, len(entries))
		for i := range entries {
			if !refused[i] && len(entries[i].req.Checks) > 0 {
				reqs = append(reqs, entries[i].req)
				at = append(at, i)
			}
		}
		if len(reqs) > 0 {
			start := time.Now()
			got, err := h.store.DecideBatch(ctx, reqs, mode)
			h.metrics.decide.observe(start, err)
			if err != nil {
				return nil, err
			}
			h.noteStore(got[0]) // once per request, as for a single send
			for k, i := range at {
				ds[i] = got[k]
			}
		}
	}
	now := time.Now()
	for i := range entries {
		e := &entries[i]
		if ds[i] == nil {
			ds[i] = &limiter.Decision{Allowed: true, Denier: -1, Now: now}
			e.req.Checks = e.req.Checks[:0]
		}
		addQuiet(&e.req, ds[i], e.quiet)
	}
	return ds, nil
}
