package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// zsetScript is the seed-002 design, reimplemented as the baseline: one
// sorted set per rule and tuple, one member per send, a sliding window by
// score. It is benchmark scaffolding, not product code, so it lives here
// rather than in lua/.
//
// KEYS[1] the rule's sorted set; ARGV: now ms, window ms, limit, member,
// and "1" to set the key's expiry (now + window), "0" to leave it.
// Reply: 1 admitted (and recorded), 0 denied.
var zsetScript = redis.NewScript(`
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, tonumber(ARGV[1]) - tonumber(ARGV[2]))
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], ARGV[1], ARGV[4])
  if ARGV[5] == '1' then
    redis.call('PEXPIREAT', KEYS[1], tonumber(ARGV[1]) + tonumber(ARGV[2]))
  end
  return 1
end
return 0`)

type zsetRule struct {
	name    string
	window  int64
	limit   int64
	content bool
}

var zsetRules = []zsetRule{
	{"recipient_minute", 60_000, 15, false},
	{"recipient_day", 86_400_000, 50, false},
	{"same_content_59s", 59_000, 2, true},
	{"same_content_59m", 3_540_000, 5, true},
}

var zsetSeq atomic.Int64

// zsetDecider checks the four rules one EVALSHA after another, stopping at
// the first denial (as seed 002 does), or, pipelined, all four in one round
// trip.
func zsetDecider(client *redis.Client, pipelined bool) decider {
	return func(ctx context.Context, s send, now time.Time) (bool, error) {
		who := "zs:{u" + strconv.Itoa(int(s.recipient)) + "}:"
		what := contentHash(s.content)
		ms := now.UnixMilli()
		member := strconv.FormatInt(ms, 10) + "-" + strconv.FormatInt(zsetSeq.Add(1), 10)
		// The clock is simulated: the day ends at the run's start, so
		// a short window's expiry (a minute after a send early in the
		// day) is already past on Redis's clock, and PEXPIREAT would
		// delete the set it has just written, and with it the count.
		// Such a key is left to zsetExpire after the run instead.
		realNow := time.Now().UnixMilli()
		expire := func(r zsetRule) string {
			if ms+r.window > realNow {
				return "1"
			}
			return "0"
		}
		key := func(r zsetRule) string {
			if r.content {
				return who + r.name + ":" + what
			}
			return who + r.name
		}
		if pipelined {
			cmds := make([]*redis.Cmd, len(zsetRules))
			_, err := client.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i, r := range zsetRules {
					cmds[i] = zsetScript.EvalSha(ctx, p, []string{key(r)}, ms, r.window, r.limit, member, expire(r))
				}
				return nil
			})
			if err != nil {
				return false, err
			}
			for _, c := range cmds {
				if n, _ := c.Int64(); n == 0 {
					return false, nil
				}
			}
			return true, nil
		}
		for _, r := range zsetRules {
			n, err := zsetScript.Run(ctx, client, []string{key(r)}, ms, r.window, r.limit, member, expire(r)).Int64()
			if err != nil {
				return false, err
			}
			if n == 0 {
				return false, nil
			}
		}
		return true, nil
	}
}

// zsetExpire does, at the simulated end of the day, what expiry on that
// clock would have done by then: it drops every send that has left its
// rule's window, which removes the sets left empty, so that the memory
// measured next is what seed 002 holds at that moment. It runs after the
// Redis CPU is read.
func zsetExpire(ctx context.Context, client *redis.Client, end time.Time) error {
	windows := make(map[string]int64, len(zsetRules))
	for _, r := range zsetRules {
		windows[r.name] = r.window
	}
	var cursor uint64
	for {
		keys, next, err := client.Scan(ctx, cursor, "zs:*", 10_000).Result()
		if err != nil {
			return err
		}
		pipe := client.Pipeline()
		for _, k := range keys {
			// zs:{u<recipient>}:<rule>[:<content>]
			_, rest, _ := strings.Cut(k, "}:")
			name, _, _ := strings.Cut(rest, ":")
			w, ok := windows[name]
			if !ok {
				return fmt.Errorf("zsetExpire: key %q names no rule", k)
			}
			pipe.ZRemRangeByScore(ctx, k, "0", strconv.FormatInt(end.UnixMilli()-w, 10))
		}
		if _, err := pipe.Exec(ctx); err != nil {
			return err
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}
