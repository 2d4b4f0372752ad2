package redisstore

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// leaseCalls builds the calls of a batch send to the recipients named.
func leaseCalls(t *testing.T, who ...string) []*call {
	t.Helper()
	rule := &limiter.Rule{Name: "hour", By: []string{"recipient"}, Limit: 10, Window: limiter.Window{Duration: time.Hour}}
	var calls []*call
	for _, w := range who {
		p := limiter.GetPlan()
		r := limitertest.Req(time.Unix(1_800_000_000, 0), limitertest.Vals{"recipient": w}, rule)
		if err := p.Build("lease:", r, r.Now); err != nil {
			t.Fatal(err)
		}
		calls = append(calls, &call{p: p})
	}
	return calls
}

// A batch that shares a key with a leased one waits until that lease ends;
// one that shares none, or repeats its own key, does not wait; a wait ends
// with the context.
func TestKeyLeasesWaitForSharedKeys(t *testing.T) {
	l := newKeyLeases()
	ctx := context.Background()
	first, err := l.acquire(ctx, leaseCalls(t, "ann", "bob", "ann"))
	if err != nil {
		t.Fatalf("a batch naming a key twice: %v", err)
	}
	if _, err := l.acquire(ctx, leaseCalls(t, "cid")); err != nil {
		t.Fatalf("a batch sharing no key: %v", err)
	}

	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := l.acquire(short, leaseCalls(t, "dee", "bob")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a batch sharing a held key got %v before the lease ended, want the context's deadline", err)
	}

	got := make(chan *lease)
	go func() {
		ls, err := l.acquire(ctx, leaseCalls(t, "dee", "bob"))
		if err != nil {
			t.Error(err)
		}
		got <- ls
	}()
	select {
	case <-got:
		t.Fatal("a batch sharing a held key went ahead of the lease")
	case <-time.After(20 * time.Millisecond):
	}
	l.release(first)
	second := <-got
	l.release(second)
	if len(l.held) != 1 { // cid's
		t.Fatalf("%d hashes held after the releases, want cid's 1", len(l.held))
	}
}

// Urgent batches (here every batch that has to wait: urgentAfter is 0) go
// in the order they became urgent: a batch whose key is free still waits behind an older
// urgent one that wants it, so a batch that needs many keys at once cannot
// lose every race to batches that need a few. An urgent batch that gives up
// lets those behind it go.
func TestKeyLeasesServeUrgentWaitersInOrder(t *testing.T) {
	ctx := context.Background()
	acquireLater := func(l *keyLeases, ctx context.Context, who ...string) chan *lease {
		got := make(chan *lease, 1)
		go func() {
			ls, err := l.acquire(ctx, leaseCalls(t, who...))
			if err != nil {
				ls = nil
			}
			got <- ls
		}()
		return got
	}
	queued := func(l *keyLeases, n int) {
		t.Helper()
		for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			l.mu.Lock()
			waiters := l.ticket
			l.mu.Unlock()
			if waiters >= uint64(n) {
				return
			}
		}
		t.Fatalf("fewer than %d batches started waiting", n)
	}
	blocked := func(got chan *lease, what string) {
		t.Helper()
		select {
		case <-got:
			t.Fatalf("%s went ahead", what)
		case <-time.After(30 * time.Millisecond):
		}
	}

	t.Run("in order", func(t *testing.T) {
		l := newKeyLeases()
		l.urgentAfter = 0
		a, _ := l.acquire(ctx, leaseCalls(t, "k1"))
		b := acquireLater(l, ctx, "k1", "k2")
		queued(l, 1)
		c := acquireLater(l, ctx, "k2")
		queued(l, 2)
		blocked(c, "a batch whose free key an older waiter wants")
		l.release(a)
		bl := <-b
		if bl == nil {
			t.Fatal("the older waiter did not get its keys")
		}
		blocked(c, "a batch sharing a key with the lease just taken")
		l.release(bl)
		if <-c == nil {
			t.Fatal("the younger waiter did not get its key")
		}
	})
	t.Run("a waiter gives up", func(t *testing.T) {
		l := newKeyLeases()
		l.urgentAfter = 0
		a, _ := l.acquire(ctx, leaseCalls(t, "k1"))
		short, cancel := context.WithTimeout(ctx, 60*time.Millisecond)
		defer cancel()
		b := acquireLater(l, short, "k1", "k2")
		queued(l, 1)
		c := acquireLater(l, ctx, "k2")
		if <-b != nil {
			t.Fatal("a batch got a key still held")
		}
		if <-c == nil {
			t.Fatal("the batch behind one that gave up did not get its key")
		}
		l.release(a)
		if len(l.waiting) != 0 {
			t.Fatalf("%d hashes still have waiters", len(l.waiting))
		}
	})
}

// A waiting batch is overtaken when a lease taken after it started waiting
// holds its key; overtaken urgentAfter times, it becomes urgent, and the
// next batch for that key, which would have gone ahead, waits behind it.
// Leases taken before it waited do not count.
func TestKeyLeasesOvertakenBatchBecomesUrgent(t *testing.T) {
	l := newKeyLeases()
	ctx := context.Background()
	first, _ := l.acquire(ctx, leaseCalls(t, "k1"))
	waiter := l.newLease(leaseCalls(t, "k1"))
	if l.tryHold(waiter) == nil || waiter.overtaken != 0 {
		t.Fatalf("a held key: the waiter got it, or counts %d overtakes for a lease older than its wait", waiter.overtaken)
	}
	holder := first
	for i := 1; i <= l.urgentAfter; i++ {
		l.release(holder)
		var err error
		if holder, err = l.acquire(ctx, leaseCalls(t, "k1")); err != nil {
			t.Fatalf("overtake %d: %v", i, err)
		}
		if l.tryHold(waiter) == nil || waiter.overtaken != uint64(i) {
			t.Fatalf("after %d overtakes the waiter counts %d", i, waiter.overtaken)
		}
	}
	if waiter.ticket == 0 {
		t.Fatalf("overtaken %d times, the waiter is not urgent", l.urgentAfter)
	}
	l.release(holder)
	late := l.newLease(leaseCalls(t, "k1"))
	if l.tryHold(late) == nil {
		t.Fatal("a new batch took the key an urgent batch waits for")
	}
	if l.tryHold(waiter) != nil {
		t.Fatal("the urgent batch did not get its free key")
	}
	if len(l.waiting) != 0 {
		t.Fatalf("%d hashes still queued after the urgent batch got its keys", len(l.waiting))
	}
}

// Batch sends of one store that share recipients, sent at once, are decided
// in Go one after the other on the keys they share: no write finds a key
// changed (no conflict, so no batch goes to the script), and every recipient
// counts exactly what was admitted.
func TestConcurrentBatchSendsDoNotConflict(t *testing.T) {
	c := redistest.Client(t)
	s := New(c, Options{Timeout: 5 * time.Second, Prefix: "leases:"})
	defer s.Close()
	rule := &limiter.Rule{Name: "hour", By: []string{"recipient"}, Limit: 1000, Window: limiter.Window{Duration: time.Hour}}
	at := limitertest.MustParse(t, "2026-05-01T10:00:00Z")
	const senders, rounds, recipients = 8, 20, 50
	sendBatches(t, []*Store{s}, senders, rounds, func(int) []limiter.Request {
		reqs := make([]limiter.Request, recipients)
		for i := range reqs {
			reqs[i] = *limitertest.Req(at, limitertest.Vals{"recipient": "r" + strconv.Itoa(i)}, rule)
		}
		return reqs
	}, func(_ int, ds []*limiter.Decision) {
		for i, d := range ds {
			if !d.Allowed {
				t.Errorf("entry %d denied under a limit of 1000", i)
				return
			}
		}
	})
	if n := s.Conflicts(); n != 0 {
		t.Errorf("%d batch sends found a key changed at their write", n)
	}
	for i := 0; i < recipients; i++ {
		u := limitertest.MustUsage(t, s, limitertest.Req(at, limitertest.Vals{"recipient": "r" + strconv.Itoa(i)}, rule))
		if u.Results[0].Used != senders*rounds {
			t.Fatalf("r%d counts %d, want %d", i, u.Results[0].Used, senders*rounds)
		}
	}
}
