package redisstore

import (
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// A sender hammering a few recipients through one gateway with two batches
// in flight: a loop that takes a decision whose key the other loop has in
// flight hands it over, so a key is never in both batches at once and no
// write of this store finds it changed by the other batch (each such
// conflict sent its batch to the script and made the key hot). Every
// count stays exact.
func TestOneRecipientsDecisionsShareOneLoop(t *testing.T) {
	rule := &limiter.Rule{Name: "hour", By: []string{"recipient"}, Limit: 100000, Window: limiter.Window{Duration: time.Hour}}
	at := limitertest.MustParse(t, "2026-05-01T10:00:00Z")
	// GoBatchMin 1: every batch is decided in Go, however small, so
	// every write is a compare-and-set that could conflict.
	s := New(redistest.Client(t), Options{Timeout: 5 * time.Second, Prefix: "one-loop:", GoBatchMin: 1, InFlight: 2})
	defer s.Close()
	for round := 0; round < 5; round++ {
		burst(t, s, at.Add(time.Duration(round)*time.Millisecond), rule, 3, 200)
	}
	if t.Failed() {
		return
	}
	if n := s.Conflicts(); n != 0 {
		t.Fatalf("%d batches found a key changed by this store's other batch in flight, want 0", n)
	}
}
