package limiter

import (
	"context"
	"errors"
	"strconv"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// leaseCalls builds the calls of a batch send to the recipients named.
func leaseCalls(t *testing.T, who ...string) []*call {
	t.Helper()
	rule := &Rule{Name: "hour", By: []string{"recipient"}, Limit: 10, Window: Window{Duration: time.Hour}}
	var calls []*call
	for _, w := range who {
		p := getPlan()
		r := req(time.Unix(1_800_000_000, 0), vals{"recipient": w}, rule)
		if err := p.build("lease:", r, r.Now); err != nil {
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

// Batch sends of one store that share recipients, sent at once, are decided
// in Go one after the other on the keys they share: no write finds a key
// changed (no conflict, so no batch goes to the script), and every recipient
// counts exactly what was admitted.
func TestConcurrentBatchSendsDoNotConflict(t *testing.T) {
	c := redistest.Client(t)
	s := NewRedis(c, RedisOptions{Timeout: 5 * time.Second, Prefix: "leases:"})
	defer s.Close()
	rule := &Rule{Name: "hour", By: []string{"recipient"}, Limit: 1000, Window: Window{Duration: time.Hour}}
	at := mustParse(t, "2026-05-01T10:00:00Z")
	const senders, rounds, recipients = 8, 20, 50
	sendBatches(t, []*Redis{s}, senders, rounds, func(int) []Request {
		reqs := make([]Request, recipients)
		for i := range reqs {
			reqs[i] = *req(at, vals{"recipient": "r" + strconv.Itoa(i)}, rule)
		}
		return reqs
	}, func(_ int, ds []*Decision) {
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
		u := mustUsage(t, s, req(at, vals{"recipient": "r" + strconv.Itoa(i)}, rule))
		if u.Results[0].Used != senders*rounds {
			t.Fatalf("r%d counts %d, want %d", i, u.Results[0].Used, senders*rounds)
		}
	}
}
