package redisstore

import (
	"context"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"
)

// History implements Historian: one pipeline of a GET a key (and TIME,
// unless req.Now is set), decoded and read in Go as the memory store
// reads its own.
func (s *Store) History(ctx context.Context, req *limiter.Request) ([]limiter.Sends, error) {
	nowArg, approx := s.nowArg(req)
	p := limiter.GetPlan()
	defer p.Release()
	if err := p.Build(s.opts.Prefix, req, approx); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, s.opts.Timeout)
	defer cancel()
	src := historySource{}
	gets := map[string]*redis.StringCmd{}
	var clock *redis.TimeCmd
	_, err := s.client.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		if nowArg == 0 {
			clock = pipe.Time(ctx)
		}
		for si := range p.Sections {
			key := string(p.Key(&p.Sections[si]))
			if gets[key] == nil {
				gets[key] = pipe.Get(ctx, key)
			}
		}
		return nil
	})
	if err != nil && err != redis.Nil {
		return nil, classify(err)
	}
	now := nowArg
	if clock != nil {
		now = clock.Val().UnixMilli()
	}
	for key, g := range gets {
		b, err := g.Bytes()
		if err == redis.Nil {
			continue
		}
		if err != nil {
			return nil, classify(err)
		}
		k := new(recordlog.KeyLogs)
		if err := recordlog.DecodeBlob(b, k); err != nil {
			return nil, fmt.Errorf("%w: key %q: %v", limiter.ErrStore, key, err)
		}
		src[key] = k
	}
	return limiter.HistoryOn(src, p, now, len(req.Checks))
}

// historySource is the keys a history read, by name.
type historySource map[string]*recordlog.KeyLogs

func (h historySource) Lookup(p *limiter.Plan, si int, now int64) *recordlog.KeyLogs {
	k := h[string(p.Key(&p.Sections[si]))]
	if k != nil {
		k.Prune(now)
	}
	return k
}

func (h historySource) Create(*limiter.Plan, int) *recordlog.KeyLogs { return nil } // never: nothing is written
