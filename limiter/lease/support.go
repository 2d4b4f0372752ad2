package lease

import (
	"context"
	"fmt"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// This file is what support reads through a lease store: the inner
// store's, as it holds them. A leased log holds blocks, so it lists a
// block as one record and one send of its units, at the time it was
// taken.

// Held implements limiter.Lister when the inner store does.
func (s *Store) Held(ctx context.Context, dim, value string, now time.Time) ([]limiter.HeldLog, error) {
	l, ok := s.inner.(limiter.Lister)
	if !ok {
		return nil, fmt.Errorf("%w: the store cannot list what it holds", limiter.ErrStore)
	}
	return l.Held(ctx, dim, value, now)
}

// History implements limiter.Historian when the inner store does.
func (s *Store) History(ctx context.Context, req *limiter.Request) ([]limiter.Sends, error) {
	h, ok := s.inner.(limiter.Historian)
	if !ok {
		return nil, fmt.Errorf("%w: the store keeps no history", limiter.ErrStore)
	}
	ext := s.extendRequest(req) // the sends Usage counts (see Usage)
	return h.History(ctx, &ext)
}
