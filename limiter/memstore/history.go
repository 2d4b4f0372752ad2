package memstore

import (
	"context"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// History implements Historian.
func (m *Store) History(_ context.Context, req *limiter.Request) ([]limiter.Sends, error) {
	var sends []limiter.Sends
	err := m.locked(req, func(p *limiter.Plan, tx *memTxn, now int64) (err error) {
		sends, err = limiter.HistoryOn(tx, p, now, len(req.Checks))
		return err
	})
	return sends, err
}
