package redisstore

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// Closing the store while decisions are in flight loses none that was
// admitted: Close waits for the batches' writes, and a decision queued as
// the store closes fails at once instead of at its timeout.
func TestCloseKeepsAdmittedDecisions(t *testing.T) {
	c := redistest.Client(t)
	rule := &limiter.Rule{Name: "many", By: []string{"recipient"}, Limit: 10_000, Window: limiter.Window{Duration: time.Hour}}
	at := limitertest.MustParse(t, "2026-05-01T10:00:00Z")
	for round := 0; round < 5; round++ {
		who := "closing" + strconv.Itoa(round)
		s := New(c, Options{Timeout: 5 * time.Second, GoBatchMin: 1})
		var admitted atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for g := 0; g < 64; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, err := s.Decide(context.Background(), limitertest.Req(at, limitertest.Vals{"recipient": who}, rule))
				if err == nil && d.Allowed {
					admitted.Add(1)
				}
			}()
		}
		time.Sleep(time.Duration(round) * 300 * time.Microsecond)
		s.Close()
		wg.Wait()
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("round %d: the decisions took %s to end after Close (the timeout is 5 s)", round, took)
		}
		check := New(c, Options{Timeout: 5 * time.Second, GoBatchMin: 1})
		u := limitertest.MustUsage(t, check, limitertest.Req(at, limitertest.Vals{"recipient": who}, rule))
		check.Close()
		if u.Results[0].Used != admitted.Load() {
			t.Fatalf("round %d: %d decisions admitted, %d recorded", round, admitted.Load(), u.Results[0].Used)
		}
	}
}
