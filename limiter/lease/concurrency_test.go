package lease

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// slow holds every decision until release is closed.
type slow struct {
	*counting
	release chan struct{}
}

func (s *slow) Decide(ctx context.Context, req *limiter.Request) (*limiter.Decision, error) {
	<-s.release
	return s.counting.Decide(ctx, req)
}

// Many requests that find no units in hand at once take one block: one
// acquisition is in flight a key, the others wait for it and take their
// units from it; a request whose context ends while it waits fails with
// ErrTimeout, and so goes to on_error.
func TestOneAcquisitionInFlightAKey(t *testing.T) {
	c := newClock(t0)
	inner := &slow{counting: memInner(t, c), release: make(chan struct{})}
	g := gateway(t, inner, c, time.Minute)
	rule := coupons(1000)

	ctx, cancel := context.WithCancel(context.Background())
	impatient := make(chan error, 1)
	go func() {
		_, err := g.Decide(ctx, req(check(rule, "c")))
		impatient <- err
	}()
	var wg sync.WaitGroup
	admitted := make(chan bool, 50)
	for range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			d, err := g.Decide(context.Background(), req(check(rule, "c")))
			admitted <- err == nil && d.Allowed
		}()
	}
	time.Sleep(50 * time.Millisecond) // let them all queue behind the first
	cancel()
	if err := <-impatient; err != nil && !errors.Is(err, limiter.ErrTimeout) {
		t.Errorf("a request whose context ended while waiting: %v; want ErrTimeout", err)
	}
	close(inner.release)
	wg.Wait()
	close(admitted)
	for ok := range admitted {
		if !ok {
			t.Fatal("a request was not admitted")
		}
	}
	if n := inner.decides.Load(); n != 1 {
		t.Errorf("%d store decisions for 50 concurrent requests; want 1 block", n)
	}
}
