package caddymodule

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/freqcap/caddy-freqcap/limiter/redisstore"
)

// recheckFirst and recheckMax bound the wait between two checks of a
// store that some node left unanswered at start: it doubles from the
// first to the most, so that a node down for long costs its servers a
// probe every few minutes, not every few seconds.
const (
	recheckFirst = 5 * time.Second
	recheckMax   = 5 * time.Minute
)

// unanswered reports whether the start check could not ask some data
// node: what it would refuse is still unknown. A sentinel down is left
// out: a Sentinel set tolerates one, and the master it names was asked
// (had none answered, the master could not be reached either).
func unanswered(check redisstore.StartCheck) bool {
	if check.Err != nil {
		return true
	}
	for _, n := range check.Nodes {
		if n.Err != nil && !n.Sentinel {
			return true
		}
	}
	return false
}

// recheckWhenAnswered runs the start check again, from a store that some
// node left unanswered at start, first after recheckFirst and then after
// twice the wait before, up to recheckMax, until every data node answers;
// it then logs what a start would have: a refusal (a read-only replica, a
// missing permission, a renamed command) at error, since it can no
// longer fail the load and lasts until someone acts, or else what
// logStartCheck logs. Without it, a server that was slow or down at start
// and turned out to refuse the gateway showed only as a store failing,
// every decision going to on_error for good. It returns when ctx ends (the
// config unloaded).
func recheckWhenAnswered(ctx context.Context, logger *zap.Logger, s *redisstore.Store, cfg *redisstore.Config, fields []zap.Field, first time.Duration) {
	wait := first
	for {
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		cctx, cancel := context.WithTimeout(ctx, startCheckTimeout)
		check := startCheck(cctx, s, cfg)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err := refusalError(check, cfg); err != nil {
			logger.Error("frequency cap store refuses the gateway, found once it answered after an unanswered start: a configuration error, not an outage; decisions go to on_error until it is fixed",
				append(append([]zap.Field{}, fields...), zap.Error(err))...)
			return
		}
		if !unanswered(check) {
			logStartCheck(logger, check, fields)
			return
		}
		wait = min(2*wait, recheckMax)
		logger.Debug("frequency cap store still unanswered: checking it again later",
			append(append([]zap.Field{}, fields...), zap.Duration("next", wait), zap.NamedError("reason", check.Err))...)
	}
}
