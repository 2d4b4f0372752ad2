package redisstore

import (
	"errors"
	"net"
	"strings"
	"syscall"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// This file names why a store call failed, for the metric and the log
// line that say so, and sorts out the two failures an operator must act
// on rather than wait out: Redis out of memory, and a user without a
// permission.

var (
	// ErrOutOfMemory is returned (wrapping ErrStore) when Redis refused a
	// write because it is at maxmemory with nothing it may evict: under
	// noeviction, or under an evicting policy that found nothing to free
	// (which also means it may be evicting counts). Nothing was written:
	// a script's first write is the one refused. Decisions go to on_error
	// until memory is freed or maxmemory raised.
	ErrOutOfMemory = storeError("redis is out of memory (at maxmemory, with nothing it may evict)")
	// ErrNoPermission is returned (wrapping ErrStore) when Redis's ACL
	// refused a command or a key to the gateway's user.
	ErrNoPermission = storeError("the redis user may not run a command or touch a key the store needs")
)

// storeError makes a sentinel error that wraps ErrStore: errors.Is finds
// both.
func storeError(msg string) error { return &storeSentinel{msg: msg} }

type storeSentinel struct{ msg string }

func (e *storeSentinel) Error() string { return limiter.ErrStore.Error() + ": " + e.msg }

func (e *storeSentinel) Unwrap() error { return limiter.ErrStore }

// The reasons Reason returns.
const (
	ReasonTimeout     = "timeout"
	ReasonUnreachable = "unreachable"
	ReasonOutOfMemory = "out_of_memory"
	ReasonPermission  = "no_permission"
	ReasonRefused     = "refused"
	ReasonClockSkew   = "clock_skew"
	ReasonOther       = "other"
)

// Reason names why a store call failed with err, as one of the Reason
// constants: timeout (no answer within the timeout), unreachable (no
// connection: refused, reset, closed), out_of_memory (ErrOutOfMemory),
// no_permission (ErrNoPermission, or ErrLoginRefused), refused (a
// refusal Redis makes before running a command, such as CLUSTERDOWN or
// LOADING, still there when the store's retries ran out; see
// refusals.go), clock_skew, or other. It returns "" for nil.
func Reason(err error) string {
	var ne net.Error
	var oe *net.OpError
	switch {
	case err == nil:
		return ""
	case errors.Is(err, limiter.ErrTimeout):
		return ReasonTimeout
	case errors.Is(err, ErrOutOfMemory):
		return ReasonOutOfMemory
	case IsRefusal(err):
		return ReasonPermission
	case errors.Is(err, limiter.ErrClockSkew):
		return ReasonClockSkew
	case refusedBeforeRunning(err):
		return ReasonRefused
	case errors.As(err, &oe), errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET),
		errors.Is(err, net.ErrClosed), errors.As(err, &ne), unreachableText(err.Error()):
		return ReasonUnreachable
	}
	return ReasonOther
}

// unreachableText reports whether a message (the store wraps the
// client's errors as text) says the connection failed.
func unreachableText(msg string) bool {
	for _, s := range []string{"connection refused", "connection reset", "broken pipe", "EOF", "use of closed network connection", "no such host", "i/o timeout", "dial tcp"} {
		if strings.Contains(msg, s) {
			return true
		}
	}
	return false
}

// outOfMemory reports whether a Redis error message is the OOM refusal.
func outOfMemory(msg string) bool {
	return strings.HasPrefix(msg, "OOM ") || strings.Contains(msg, ": OOM ") || strings.Contains(msg, "OOM command not allowed")
}
