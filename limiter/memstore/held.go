package memstore

import (
	"context"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// This file lists what a store holds about one value of a first dimension
// (every record log under the key of recipient=alice: her own counts, and
// one log for each content, channel or campaign she was sent), for support
// staff asked "what do you hold about this person?" and "reset all of it".
// A request names its logs by all their dimensions' values; a listing has
// only the first, so it reads the key whole and names each log by the id
// stored in it (HeldLog.Sub), which a Check then reads or resets through
// Check.Sub.

// Held implements Lister.
func (m *Store) Held(_ context.Context, dim, value string, now time.Time) ([]limiter.HeldLog, error) {
	var held []limiter.HeldLog
	err := m.locked(limiter.HeldRequest(dim, value, now), func(p *limiter.Plan, tx *memTxn, now int64) (err error) {
		held, err = limiter.HeldOf(tx.Lookup(p, 0, now))
		return err
	})
	return held, err
}
