package redisstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// A decision whose caller stopped waiting (the store's timeout) before a
// loop took it into a batch is never decided: its send, answered as failed
// (503 under on_error deny), is not counted. Redis paused for 600 ms under
// 600 concurrent sends to one recipient: only the batches already sent
// when it paused may be recorded for sends that failed. Before, every
// queued call was decided once Redis answered again, and a sender's 503s
// were counted against her (found by probing: 48,720 of 60,516 refused).
func TestAbandonedCallsAreNotDecided(t *testing.T) {
	srv := redistest.Start(t)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer client.Close()
	s := New(client, Options{Timeout: 50 * time.Millisecond})
	defer s.Close()
	ctx := context.Background()
	rule := &limiter.Rule{Name: "hour", By: []string{"recipient"}, Limit: 100_000, Window: limiter.Window{Duration: time.Hour}}
	send := func() *limiter.Request {
		return limitertest.Req(time.Time{}, limitertest.Vals{"recipient": "victim"}, rule)
	}
	if d, err := s.Decide(ctx, send()); err != nil || !d.Allowed {
		t.Fatalf("warm-up: %v %v", d, err)
	}
	if err := client.ClientPause(ctx, 600*time.Millisecond).Err(); err != nil {
		t.Fatal(err)
	}
	const n = 600
	var admitted, failed atomic.Int64
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := s.Decide(ctx, send())
			switch {
			case errors.Is(err, limiter.ErrTimeout):
				failed.Add(1)
			case err == nil && d.Allowed:
				admitted.Add(1)
			default:
				t.Errorf("decide: %v %v", d, err)
			}
		}()
	}
	wg.Wait()
	time.Sleep(time.Second) // the pause ends; whatever was sent is answered
	d, err := s.Usage(ctx, send())
	if err != nil {
		t.Fatal(err)
	}
	counted := d.Results[0].Used - 1 - admitted.Load()
	// At most the batches in flight when Redis paused: InFlight loops of
	// MaxBatch calls (2 × 64).
	if bound := int64(2 * 64); failed.Load() == 0 || counted > bound {
		t.Errorf("%d sends failed and %d of them were counted; want failures, at most %d counted", failed.Load(), counted, bound)
	}
	t.Logf("%d admitted, %d failed, %d of the failed counted", admitted.Load(), failed.Load(), counted)
}
