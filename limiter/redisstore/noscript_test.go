package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// A write whose script the server no longer holds (a restart, SCRIPT
// FLUSH) goes again after its round trip, which already carried the next
// batch's read: that batch reads again, so its write does not find the
// keys changed and nothing is decided twice. Every count stays exact.
func TestWriteSentAgainIsReadAfter(t *testing.T) {
	rule := &limiter.Rule{Name: "hour", By: []string{"recipient"}, Limit: 3, Window: limiter.Window{Duration: time.Hour}}
	c := redistest.Client(t)
	// One batch in flight and no batch too small for Go: the only writes
	// are this loop's, so a conflict can only come from its own order.
	s := New(c, Options{Timeout: 5 * time.Second, Prefix: "noscript:", GoBatchMin: 1, InFlight: 1})
	defer s.Close()
	const rounds, recipients, each = 10, 8, 5
	for round := 0; round < rounds; round++ {
		if err := c.ScriptFlush(context.Background()).Err(); err != nil {
			t.Fatal(err)
		}
		at := limitertest.MustParse(t, "2026-05-01T10:00:00Z").Add(time.Duration(round) * 2 * time.Hour)
		burst(t, s, at, rule, recipients, each)
	}
	if n := s.Conflicts(); n != 0 {
		t.Fatalf("%d writes found a key changed after a write was sent again", n)
	}
}
