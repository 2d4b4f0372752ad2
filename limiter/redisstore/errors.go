package redisstore

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// This file sorts what goes wrong with Redis into the sentinel errors the
// callers act on: ErrTimeout, ErrClockSkew, or else ErrStore.

var errStoreClosed = fmt.Errorf("%w: store closed", limiter.ErrStore)

// classify wraps a client error in ErrTimeout, ErrClockSkew,
// ErrOutOfMemory, ErrLoginRefused, ErrNoPermission or ErrStore (the
// three before it wrap ErrStore too).
func classify(err error) error {
	var ne net.Error
	switch {
	case errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout()):
		return fmt.Errorf("%w: %v", limiter.ErrTimeout, err)
	case strings.HasPrefix(err.Error(), clockSkew):
		return fmt.Errorf("%w: %v", limiter.ErrClockSkew, err)
	case outOfMemory(err.Error()):
		return fmt.Errorf("%w: %v", ErrOutOfMemory, err)
	case IsLoginRefusal(err):
		return fmt.Errorf("%w: %v", ErrLoginRefused, err)
	case IsPermissionRefusal(err):
		return fmt.Errorf("%w: %v", ErrNoPermission, err)
	}
	return fmt.Errorf("%w: %v", limiter.ErrStore, err)
}

// answered is a pipelined command's error, classified: its own, or, when
// it has no answer (ok is false), the pipeline's. A pipeline that fails
// before any command is answered (a refused AUTH, a broken connection)
// need not set each command's error.
func answered(cmd redis.Cmder, ok bool, perr error) error {
	err := cmd.Err()
	if err == nil && !ok {
		err = perr
		if err == nil {
			err = fmt.Errorf("no answer to %s", cmd.Name())
		}
	}
	if err != nil {
		return classify(err)
	}
	return nil
}

// timedOut is the error of a call that had no answer within the timeout.
func (s *Store) timedOut() error {
	return fmt.Errorf("%w: no answer within %s", limiter.ErrTimeout, s.opts.Timeout)
}

// cmpErr keeps the first error, preferring a timeout (callers treat both
// alike, and a timeout says more about where the time went).
func cmpErr(have, next error) error {
	if have == nil || (next != nil && errors.Is(next, limiter.ErrTimeout) && !errors.Is(have, limiter.ErrTimeout)) {
		return next
	}
	return have
}
