package main

import (
	"context"
	"runtime/metrics"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// This file measures the other side of each design: the CPU of this
// process, which is the gateway's store client (the store, go-redis, the
// batcher and the garbage collector), a decision. It is the change of the
// process's user+sys time (getrusage RUSAGE_SELF, every thread) over the
// replay, divided by the decisions, beside Redis's own CPU a decision.
//
// Nothing is subtracted. The process also builds each send's request
// (its checks, the recipient's id) and hands the sends out to the callers,
// as a gateway's handler would build them from a body. The designs
// requests and requests-batch do that alone, with no store: the store's
// share is a design's client CPU less theirs, measured in the same run.

// processCPU is this process's user+sys CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// heapAllocs is how many heap objects this process has allocated so far,
// tiny ones (under 16 bytes, without pointers) included: runtime/metrics,
// which does not stop the world as ReadMemStats does.
func heapAllocs() uint64 {
	s := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}, {Name: "/gc/heap/tiny/allocs:objects"}}
	metrics.Read(s)
	var n uint64
	for _, v := range s {
		if v.Value.Kind() == metrics.KindUint64 {
			n += v.Value.Uint64()
		}
	}
	return n
}

// requestSink keeps the last request built by the requests design, so that
// the request is made on the heap as the store's Decide makes it.
var requestSink atomic.Pointer[limiter.Request]

// requestsDecider builds each send's request as the freqcap designs do and
// admits it without a store: the requests design, the part of a decision's
// client CPU that is not the store's.
func requestsDecider() decider {
	rules := seedRules()
	return func(ctx context.Context, s send, now time.Time) (bool, error) {
		requestSink.Store(&limiter.Request{Now: now, Checks: seedChecks(nil, rules, s)})
		return true, nil
	}
}
