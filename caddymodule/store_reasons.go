package caddymodule

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/freqcap/caddy-freqcap/limiter/redisstore"
)

// storeReasons is caddy_frequency_cap_store_error_reasons_total: store
// failures by why they failed (redisstore.Reason), so that an alert can tell
// a Redis at maxmemory (out_of_memory) or a user without a permission
// (no_permission), which need an operator, from timeouts and outages,
// which pass. store_errors_total counts the same failures by operation.
var storeReasons struct {
	once sync.Once
	vec  *prometheus.CounterVec
}

// storeReasonsVec returns the collector, made once.
func storeReasonsVec() *prometheus.CounterVec {
	storeReasons.once.Do(func() {
		storeReasons.vec = prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "caddy", Subsystem: "frequency_cap", Name: "store_error_reasons_total",
			Help: "Frequency cap store calls that failed, by handler name and reason (timeout, unreachable, out_of_memory, no_permission, refused, clock_skew, other).",
		}, []string{"handler", "reason"})
	})
	return storeReasons.vec
}

// reasonCounters are one handler's series, by reason, made at provision
// so that they read 0 before anything fails.
type reasonCounters map[string]prometheus.Counter

func newReasonCounters(handler string) reasonCounters {
	rc := reasonCounters{}
	for _, r := range []string{redisstore.ReasonTimeout, redisstore.ReasonUnreachable, redisstore.ReasonOutOfMemory, redisstore.ReasonPermission,
		redisstore.ReasonRefused, redisstore.ReasonClockSkew, redisstore.ReasonOther} {
		rc[r] = storeReasonsVec().WithLabelValues(handler, r)
	}
	return rc
}

// count counts a failure; nil counters (a handler in a test built without
// Provision) count nothing.
func (rc reasonCounters) count(err error) {
	if c := rc[redisstore.Reason(err)]; c != nil {
		c.Inc()
	}
}
