package lease

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// slow holds every decision until release is closed, or its context ends
// (as the Redis store's timeout would); entered says a decision came in.
type slow struct {
	*counting
	release, entered chan struct{}
	once             sync.Once
}

func (s *slow) Decide(ctx context.Context, req *limiter.Request) (*limiter.Decision, error) {
	s.once.Do(func() { close(s.entered) })
	select {
	case <-s.release:
		return s.counting.Decide(ctx, req)
	case <-ctx.Done():
		return nil, limiter.ErrTimeout
	}
}

// Many requests that find no units in hand at once take one block: one
// acquisition is in flight a key, the others wait for it and take their
// units from it. A request whose context ends fails with ErrTimeout (and
// so goes to on_error), whether it waited or was taking the block itself;
// in that case another waiting request takes it.
func TestOneAcquisitionInFlightAKey(t *testing.T) {
	c := newClock(t0)
	inner := &slow{counting: memInner(t, c), release: make(chan struct{}), entered: make(chan struct{})}
	g := gateway(t, inner, c, time.Minute)
	rule := coupons(1000)
	decide := func(ctx context.Context, answer chan<- error) {
		d, err := g.Decide(ctx, req(check(rule, "c")))
		if err == nil && !d.Allowed {
			err = errors.New("denied")
		}
		answer <- err
	}

	acquirerCtx, cancelAcquirer := context.WithCancel(context.Background())
	acquirer := make(chan error, 1)
	go decide(acquirerCtx, acquirer)
	<-inner.entered // it is taking the block

	patient := make(chan error, 50)
	for range 50 {
		go decide(context.Background(), patient)
	}
	waiterCtx, cancelWaiter := context.WithCancel(context.Background())
	waiter := make(chan error, 1)
	go decide(waiterCtx, waiter)
	time.Sleep(50 * time.Millisecond) // let them queue behind the acquirer
	cancelWaiter()
	if err := <-waiter; !errors.Is(err, limiter.ErrTimeout) {
		t.Errorf("a waiting request whose context ended: %v; want ErrTimeout", err)
	}
	cancelAcquirer()
	if err := <-acquirer; !errors.Is(err, limiter.ErrTimeout) {
		t.Errorf("the acquiring request whose context ended: %v; want ErrTimeout", err)
	}
	close(inner.release)
	for range 50 {
		if err := <-patient; err != nil {
			t.Fatalf("a waiting request: %v", err)
		}
	}
	if n := inner.decides.Load(); n != 1 {
		t.Errorf("%d store decisions for 50 waiting requests; want 1 block", n)
	}
}

// failingSlow is a store whose Decide fails once released, its caller
// still waiting: a master that does not answer.
type failingSlow struct {
	slow
	calls atomic.Int64
}

func (s *failingSlow) Decide(ctx context.Context, req *limiter.Request) (*limiter.Decision, error) {
	s.calls.Add(1)
	s.once.Do(func() { close(s.entered) })
	<-s.release
	return nil, fmt.Errorf("%w: no answer within 100ms", limiter.ErrTimeout)
}

// The requests waiting for a block whose acquisition the store failed
// fail with it, at once: they took the acquisition in turn, each failing
// a timeout later than the one before, so that behind a master that did
// not answer (frozen, before its replica's promotion) requests waited
// seconds against a timeout of 100 ms.
func TestWaitersShareAFailedAcquisition(t *testing.T) {
	c := newClock(t0)
	inner := &failingSlow{slow: slow{counting: memInner(t, c), release: make(chan struct{}), entered: make(chan struct{})}}
	g := gateway(t, inner, c, time.Minute)
	rule := coupons(1000)
	answers := make(chan error, 51)
	decide := func() {
		_, err := g.Decide(context.Background(), req(check(rule, "c")))
		answers <- err
	}
	go decide()
	<-inner.entered
	for range 50 {
		go decide()
	}
	time.Sleep(50 * time.Millisecond) // let them queue behind the acquirer
	close(inner.release)
	for range 51 {
		if err := <-answers; !errors.Is(err, limiter.ErrTimeout) {
			t.Fatalf("a request behind a failed acquisition: %v; want ErrTimeout", err)
		}
	}
	// 1, or 2 where a request came too late to queue behind the first.
	if n := inner.calls.Load(); n > 2 {
		t.Errorf("%d acquisitions tried by 51 requests behind a failing store; want 1", n)
	}
}
