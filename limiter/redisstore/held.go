package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"
)

// This file lists what a store holds about one value of a first dimension
// (every record log under the key of recipient=alice: her own counts, and
// one log for each content, channel or campaign she was sent), for support
// staff asked "what do you hold about this person?" and "reset all of it".
// A request names its logs by all their dimensions' values; a listing has
// only the first, so it reads the key whole and names each log by the id
// stored in it (HeldLog.Sub), which a Check then reads or resets through
// Check.Sub.

// Held implements Lister: one GET of the key (and TIME, unless now is
// given).
func (s *Store) Held(ctx context.Context, dim, value string, now time.Time) ([]limiter.HeldLog, error) {
	nowArg, _ := s.nowArg(&limiter.Request{Now: now})
	key := limiter.KeyFor(s.opts.Prefix, dim, value)
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	var get *redis.StringCmd
	var clock *redis.TimeCmd
	_, err := s.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		if nowArg == 0 {
			clock = pipe.Time(ctx)
		}
		get = pipe.Get(ctx, key)
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, classify(err)
	}
	b, err := get.Bytes()
	if err == redis.Nil {
		return nil, nil
	}
	if err != nil {
		return nil, classify(err)
	}
	if clock != nil {
		nowArg = clock.Val().UnixMilli()
	}
	k := new(recordlog.KeyLogs)
	if err := recordlog.DecodeBlob(b, k); err != nil {
		return nil, fmt.Errorf("%w: key %q: %v", limiter.ErrStore, key, err)
	}
	k.Prune(nowArg)
	return limiter.HeldOf(k)
}
