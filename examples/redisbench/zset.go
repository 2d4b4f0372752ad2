package main

import (
	"context"
	"strconv"
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
// and how far to move the expiry past now + window (see zsetExpiryShift).
// Reply: 1 admitted (and recorded), 0 denied.
var zsetScript = redis.NewScript(`
redis.call('ZREMRANGEBYSCORE', KEYS[1], 0, tonumber(ARGV[1]) - tonumber(ARGV[2]))
if redis.call('ZCARD', KEYS[1]) < tonumber(ARGV[3]) then
  redis.call('ZADD', KEYS[1], ARGV[1], ARGV[4])
  redis.call('PEXPIREAT', KEYS[1], tonumber(ARGV[1]) + tonumber(ARGV[2]) + tonumber(ARGV[5]))
  return 1
end
return 0`)

// zsetExpiryShift moves every expiry the baseline sets two days later. The
// clock is simulated, and its day ends when the run starts, so a short
// window's expiry (a minute after a send early in the day) lies in Redis's
// past: PEXPIREAT would delete the set it has just written, and with it the
// count (it once did, and seed 002 admitted every send). Shifted, no key
// expires during the run, and each still pays for its PEXPIREAT as seed 002
// does; zsetExpire applies the simulated clock's expiry at the end.
const zsetExpiryShift = 2 * 24 * time.Hour

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
// the first denial (as seed 002 does: the rules checked before keep their
// records), or, pipelined, all four in one round trip (each rule that
// admits records, whatever the others answer).
func zsetDecider(client *redis.Client, pipelined bool) decider {
	shift := zsetExpiryShift.Milliseconds()
	return func(ctx context.Context, s send, now time.Time) (bool, error) {
		who := "zs:{u" + strconv.Itoa(int(s.recipient)) + "}:"
		what := contentHash(s.content)
		ms := now.UnixMilli()
		member := strconv.FormatInt(ms, 10) + "-" + strconv.FormatInt(zsetSeq.Add(1), 10)
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
					cmds[i] = zsetScript.EvalSha(ctx, p, []string{key(r)}, ms, r.window, r.limit, member, shift)
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
			n, err := zsetScript.Run(ctx, client, []string{key(r)}, ms, r.window, r.limit, member, shift).Int64()
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

// zsetExpire does at the simulated end of the day what expiry on that clock
// would have done by then: it deletes every set whose expiry (its newest
// admission plus the window, as seed 002 sets it) has passed. A set still
// alive keeps the sends that left its window since its last write, as seed
// 002's does. So the memory measured next is what seed 002 holds at that
// moment, but for one thing: Redis's key tables were sized for every set of
// the day. Its background cron shrinks a table left under a tenth full, as
// 200k recipients leave them; 20k leave them fuller, and zset4's figure then
// carries their empty slots. It runs after Redis's CPU is read.
func zsetExpire(ctx context.Context, client *redis.Client, end time.Time) error {
	deadline := end.Add(zsetExpiryShift).UnixMilli()
	var cursor uint64
	for {
		keys, next, err := client.Scan(ctx, cursor, "zs:*", 10_000).Result()
		if err != nil {
			return err
		}
		if len(keys) > 0 {
			pipe := client.Pipeline()
			at := make([]*redis.DurationCmd, len(keys))
			for i, k := range keys {
				at[i] = pipe.PExpireTime(ctx, k)
			}
			if _, err := pipe.Exec(ctx); err != nil {
				return err
			}
			var gone []string
			for i, c := range at {
				// -1 ns: no expiry; -2 ns: gone since the SCAN.
				if c.Val() > 0 && c.Val().Milliseconds() <= deadline {
					gone = append(gone, keys[i])
				}
			}
			if len(gone) > 0 {
				if err := client.Del(ctx, gone...).Err(); err != nil {
					return err
				}
			}
		}
		if cursor = next; cursor == 0 {
			return nil
		}
	}
}
