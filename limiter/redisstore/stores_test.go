package redisstore

import (
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/memstore"
)

// storeKinds runs a test once per store: the memory store, and the Redis
// store on a real redis-server deciding in Go (its default) and in the
// script (as on a cluster, and after a conflict). clock is the store's own clock (for Refund);
// requests carry their own Now.
func storeKinds(t *testing.T, f func(t *testing.T, newStore func(clock func() time.Time) limiter.Store)) {
	t.Run("memory", func(t *testing.T) {
		f(t, func(clock func() time.Time) limiter.Store {
			m := memstore.New(memstore.Options{Now: clock, SweepInterval: -1})
			t.Cleanup(func() { m.Close() })
			return m
		})
	})
	for _, scriptOnly := range []bool{false, true} {
		name := "redis"
		if scriptOnly {
			name = "redis-script"
		}
		t.Run(name, func(t *testing.T) {
			client := redistest.Client(t)
			f(t, func(clock func() time.Time) limiter.Store {
				s := New(client, Options{Now: clock, Timeout: 2 * time.Second, ScriptOnly: scriptOnly, GoBatchMin: 1})
				t.Cleanup(func() { s.Close() })
				return s
			})
		})
	}
}
