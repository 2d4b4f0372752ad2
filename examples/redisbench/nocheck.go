package main

import (
	"context"

	"github.com/redis/go-redis/v9"
)

// noCheck is a client hook that strips the check from the store's native
// writes: SET key new IFEQ old PX ttl and SET key new NX PX ttl go out as
// SET key new PX ttl. It makes freqcap-batch-nocheck, the floor measured at
// the store's own pace: the same reads, decisions and writes as
// freqcap-batch, so that the two differ only by the compare-and-set.
// floor-batch does no decision and sends its batches three to four times
// as fast, which keeps Redis busier and its caches warmer (see
// docs/performance.md). It gives up exactness: for measuring only.
type noCheck struct{}

func (noCheck) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (noCheck) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (noCheck) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		sent := make([]redis.Cmder, len(cmds))
		plain := map[int]*redis.StatusCmd{}
		for i, c := range cmds {
			sent[i] = c
			a := c.Args()
			if c.Name() != "set" || len(a) != 7 && len(a) != 6 {
				continue
			}
			switch a[3] {
			case "ifeq": // set key new ifeq old px ttl
				plain[i] = redis.NewStatusCmd(ctx, "set", a[1], a[2], "px", a[6])
			case "nx": // set key new nx px ttl
				plain[i] = redis.NewStatusCmd(ctx, "set", a[1], a[2], "px", a[5])
			default:
				continue
			}
			sent[i] = plain[i]
		}
		err := next(ctx, sent)
		for i, p := range plain {
			c := cmds[i]
			if u, ok := c.(interface{ Unwrap() redis.Cmder }); ok {
				c = u.Unwrap() // the store sends its writes wrapped, never to be sent twice
			}
			orig := c.(*redis.StatusCmd)
			orig.SetVal(p.Val())
			orig.SetErr(p.Err())
		}
		return err
	}
}
