package main

import (
	"context"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// floorValueBytes is about what the store holds for a recipient of the data
// set at the end of its day (redisbench's bytes per recipient, less Redis's
// own overhead).
const floorValueBytes = 320

// measureFloor replays the data set as batch sends of size consecutive
// sends, each batch one MGET of its recipients' keys and then one pipeline
// of SET ... PX, each writing what was read with 8 bytes more (cut to
// floorValueBytes, as the store prunes what left its windows): the least
// any design that reads a recipient's record and writes it back costs
// Redis on this data set, with no decision, no check and no atomicity.
//
// pace, when above 0, holds the batches to that many sends a second (each
// batch waits for its first send's turn): floor-batch-paced, the same
// reads and writes at a design's own pace. Redis costs less a command when
// busy (each wake-up reads several clients' commands, its caches stay
// warm), so a floor sent three to four times as fast as a design can
// decide is cheaper a key than the same commands sent as the design sends
// them; pacing compares the work alone.
func measureFloor(design string, data []send, recipients, size, callers int, core, addr string, pace float64) (result, error) {
	return measureWith(design, data, recipients, callers, core, addr, func(client *redis.Client) (decider, replayer, func(), error) {
		key := func(s send) string { return "freqcap:recipient{u" + strconv.Itoa(int(s.recipient)) + "}" }
		batch := func(ctx context.Context, sends []send) error {
			keys := make([]string, len(sends))
			for i, s := range sends {
				keys[i] = key(s)
			}
			old, err := client.MGet(ctx, keys...).Result()
			if err != nil {
				return err
			}
			_, err = client.Pipelined(ctx, func(p redis.Pipeliner) error {
				for i, k := range keys {
					v, _ := old[i].(string)
					v += "01234567"
					if len(v) > floorValueBytes {
						v = v[len(v)-floorValueBytes:]
					}
					p.Set(ctx, k, v, 25*time.Hour)
				}
				return nil
			})
			return err
		}
		warm := func(ctx context.Context, s send, _ time.Time) (bool, error) {
			return true, batch(ctx, []send{s})
		}
		replay := func(ctx context.Context, data []send, _ time.Time) (int64, error) {
			start := time.Now()
			return inParallel(callers, func(next func(n int) (int64, int64), admit func(int64)) error {
				for {
					from, to := next(size)
					if from >= to {
						return nil
					}
					if pace > 0 {
						time.Sleep(time.Until(start.Add(time.Duration(float64(from) / pace * float64(time.Second)))))
					}
					if err := batch(ctx, data[from:to]); err != nil {
						return err
					}
					admit(to - from)
				}
			}, int64(len(data)))
		}
		return warm, replay, func() {}, nil
	})
}
