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
// the store, so nothing is recorded for it. Under BatchAll such an entry
// refuses the whole batch, but the other entries are decided all the
// same, so that the answer lists every entry refused (it listed the quiet
// ones alone, and a sender that left them out was refused again); what
// they recorded, when the store admitted them all, the caller gives back
// (giveBackAll); a store that fails then leaves the answer to the quiet
// rules. An entry
// whose every rule was left out (on_missing skip) is not sent either and
// is admitted. The checks of an entry the store did not decide are
// dropped, so that Results and Checks stay parallel.
func (h *Handler) decideBatch(ctx context.Context, reqs []limiter.Request, quiet [][]quietHit, mode limiter.BatchMode) ([]*limiter.Decision, error) {
	refused := quietRefused(reqs, quiet)
	anyRefused := refused != nil
	// Most batches send every entry to the store: then reqs go as they
	// are, and its answers are the batch's.
	all := !anyRefused
	for i := 0; all && i < len(reqs); i++ {
		all = len(reqs[i].Checks) > 0
	}
	if all {
		ds, err := h.storeDecideBatch(ctx, reqs, mode)
		if err != nil {
			return nil, err
		}
		return h.undecidedBatch(reqs, quiet, ds), nil
	}
	sent := make([]limiter.Request, 0, len(reqs))
	at := make([]int, 0, len(reqs))
	for i := range reqs {
		if (refused == nil || !refused[i]) && len(reqs[i].Checks) > 0 {
			sent = append(sent, reqs[i])
			at = append(at, i)
		}
	}
	ds := make([]*limiter.Decision, len(reqs))
	if len(sent) > 0 {
		var got []*limiter.Decision
		if mode == limiter.BatchAll && anyRefused {
			got = h.decideRefusedBatch(ctx, sent)
		} else {
			var err error
			if got, err = h.storeDecideBatch(ctx, sent, mode); err != nil {
				return nil, err
			}
		}
		for k, i := range at[:len(got)] { // none where a refused batch's store failed
			ds[i] = got[k]
		}
	}
	return h.undecidedBatch(reqs, quiet, ds), nil
}

// decideRefusedBatch decides sent, the other entries of a batch that a
// quiet entry refuses under BatchAll, for its answer alone: the batch is
// refused whatever the store says, so a store that fails (nil is
// returned) leaves the answer to the quiet rules, as a single send's
// usage read does (see decide), and is no failure on_error decides (the
// batch passed whole under on_error allow). What the store recorded,
// having admitted them all, the caller gives back (giveBackAll).
func (h *Handler) decideRefusedBatch(ctx context.Context, sent []limiter.Request) []*limiter.Decision {
	start := time.Now()
	got, err := h.store.DecideBatch(ctx, sent, limiter.BatchAll)
	h.metrics.decide.observe(start, err)
	// Counted as a single send's usage read is (noteUsage): whatever the
	// store, the quiet rules refuse the batch, so on_error decides
	// nothing of it.
	if err != nil {
		h.outage.failed(time.Now(), "")
		h.warns.add(opUsage, err)
		return nil
	}
	if len(got) > 0 {
		h.noteUsage(start, got[0])
	}
	return got
}

// quietRefused reports, by entry, which entries a quiet range refuses
// (not exempt, and not a shadow rule's); nil when none.
func quietRefused(reqs []limiter.Request, quiet [][]quietHit) []bool {
	var refused []bool
	for i := range quiet {
		if reqs[i].Exempt {
			continue
		}
		for _, q := range quiet[i] {
			if !q.check.Shadow {
				if refused == nil {
					refused = make([]bool, len(reqs))
				}
				refused[i] = true
			}
		}
	}
	return refused
}

// storeDecideBatch asks the store, timed and counted.
func (h *Handler) storeDecideBatch(ctx context.Context, reqs []limiter.Request, mode limiter.BatchMode) ([]*limiter.Decision, error) {
	start := time.Now()
	got, err := h.store.DecideBatch(ctx, reqs, mode)
	h.metrics.decide.observe(start, err)
	if err != nil {
		h.outage.failed(time.Now(), h.OnError) // once per request, as for a single send
		return nil, err
	}
	if len(got) > 0 {
		h.noteStore(start, got[0]) // once per request, as for a single send
	}
	return got, nil
}

// undecidedBatch completes ds, the store's answers by entry: an entry the
// store did not decide is admitted with no checks; then each entry gets
// its quiet rules' answers.
func (h *Handler) undecidedBatch(reqs []limiter.Request, quiet [][]quietHit, ds []*limiter.Decision) []*limiter.Decision {
	var now time.Time
	for i := range reqs {
		if ds[i] == nil {
			if now.IsZero() {
				now = time.Now()
			}
			ds[i] = &limiter.Decision{Allowed: true, Denier: -1, Now: now}
			reqs[i].Checks = reqs[i].Checks[:0]
		}
		if quiet != nil {
			addQuiet(&reqs[i], ds[i], quiet[i])
		}
	}
	return ds
}
