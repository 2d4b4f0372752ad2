package caddymodule

import (
	"errors"
	"sync/atomic"
	"time"

	"go.uber.org/zap"

	"github.com/freqcap/caddy-freqcap/limiter/redisstore"
)

// refusalInterval is how often, at most, a store that refuses the
// gateway is logged.
const refusalInterval = time.Minute

// refusalLog logs at error, at most once an interval while it lasts, a
// store that answers but refuses the gateway after it started: a rotated
// password, a user deleted or stripped of a command (redisstore.IsRefusal).
// Unlike an outage it will not pass by itself, and every decision goes to
// on_error until someone acts, so it is logged louder than a failure but
// less often: each line counts the refusals since the one before. The
// metric (store_error_reasons_total, reason no_permission) counts each.
// Its methods take the time as an argument; it is safe for concurrent
// use.
type refusalLog struct {
	logger   *zap.Logger
	handler  string
	onError  string
	interval time.Duration

	last       atomic.Int64 // the last line's time (Unix nanoseconds), 0 before any
	suppressed atomic.Int64 // refusals not logged since the last line
}

// add notes a refusal of the store operation op at now, and logs it
// unless a line was written less than an interval before now. It reports
// whether it logged.
func (l *refusalLog) add(now time.Time, op string, err error) bool {
	last := l.last.Load()
	if last != 0 && now.UnixNano()-last < int64(l.interval) || !l.last.CompareAndSwap(last, now.UnixNano()) {
		l.suppressed.Add(1)
		return false
	}
	n := l.suppressed.Swap(0)
	if l.logger == nil {
		return true
	}
	what := "permission"
	if errors.Is(err, redisstore.ErrLoginRefused) {
		what = "login"
	}
	l.logger.Error("frequency cap store refuses the gateway: a configuration error, not an outage; decisions go to on_error until the credentials or the user's permissions are fixed",
		zap.String("handler", l.handler),
		zap.String("op", op),
		zap.String("on_error", l.onError),
		zap.String("reason", redisstore.Reason(err)),
		zap.String("refused", what),
		zap.Int64("refused_since_last_line", n),
		zap.Duration("interval", l.interval),
		zap.Error(err))
	return true
}
