package caddymodule

import (
	"context"
	"time"

	"go.uber.org/zap"

	"github.com/freqcap/caddy-freqcap/limiter/redisstore"
)

// recheckInterval is how often a store that some node left unanswered at
// start is checked again, until every node answers.
const recheckInterval = 5 * time.Second

// unanswered reports whether the start check could not ask some node (a
// sentinel included): what that node would refuse is still unknown.
func unanswered(check redisstore.StartCheck) bool {
	if check.Err != nil {
		return true
	}
	for _, n := range check.Nodes {
		if n.Err != nil {
			return true
		}
	}
	return false
}

// recheckWhenAnswered runs the start check again every interval, from a
// store that some node left unanswered at start, until every node
// answers, and then logs what a start would have: a refusal (a read-only
// replica, a missing permission, a renamed command) at error, since it
// can no longer fail the load and lasts until someone acts, or else what
// logStartCheck logs. Without it, a server that was slow or down at start
// and turned out to refuse the gateway showed only as a store failing,
// every decision going to on_error for good. It returns when ctx ends
// (the config unloaded).
func recheckWhenAnswered(ctx context.Context, logger *zap.Logger, s *redisstore.Store, cfg *redisstore.Config, fields []zap.Field, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
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
	}
}
