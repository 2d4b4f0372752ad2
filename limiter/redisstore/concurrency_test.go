package redisstore

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
	"github.com/freqcap/caddy-freqcap/limiter/memstore"
)

// hammer sends goroutines×each decisions through the stores (round robin)
// and returns how many were admitted.
func hammer(t *testing.T, stores []limiter.Store, goroutines, each int, mk func(g, i int) *limiter.Request) int64 {
	t.Helper()
	var admitted atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := stores[g%len(stores)]
			for i := 0; i < each; i++ {
				d, err := s.Decide(context.Background(), mk(g, i))
				if err != nil {
					errs <- err
					return
				}
				if d.Allowed {
					admitted.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("decide: %v", err)
	}
	return admitted.Load()
}

// 64 goroutines × 10 requests for one recipient admit exactly the limit:
// in the memory store, through one Redis client, and through two separate
// clients (two gateways on one Redis).
func TestConcurrentOneRecipientExactlyLimit(t *testing.T) {
	rules := limitertest.SeedRules()
	mk := func(g, i int) *limiter.Request {
		// Distinct content per request, so recipient_minute (15) binds.
		return limitertest.Req(time.Time{}, limitertest.Vals{"recipient": "hot", "content": fmt.Sprint(g, "-", i)}, rules...)
	}
	t.Run("memory", func(t *testing.T) {
		m := memstore.New(memstore.Options{})
		defer m.Close()
		if got := hammer(t, []limiter.Store{m}, 64, 10, mk); got != 15 {
			t.Fatalf("admitted %d, want exactly 15", got)
		}
	})
	t.Run("redis one client", func(t *testing.T) {
		c := redistest.Client(t)
		s := New(c, Options{Timeout: 5 * time.Second})
		if got := hammer(t, []limiter.Store{s}, 64, 10, mk); got != 15 {
			t.Fatalf("admitted %d, want exactly 15", got)
		}
	})
	t.Run("redis two clients", func(t *testing.T) {
		url := redistest.URL(t)
		var stores []limiter.Store
		for i := 0; i < 2; i++ {
			opt, _ := redis.ParseURL(url)
			c := redis.NewClient(opt)
			defer c.Close()
			if i == 0 {
				c.FlushDB(context.Background())
			}
			stores = append(stores, New(c, Options{Timeout: 5 * time.Second}))
		}
		if got := hammer(t, stores, 64, 10, mk); got != 15 {
			t.Fatalf("admitted %d, want exactly 15", got)
		}
	})
}

// A per-campaign budget beside per-recipient caps lives on other hash tags,
// so it is decided by reserving on each tag and rolling back when any
// denies. Under concurrency nothing is over-admitted, and once the dust
// settles the budget's log holds exactly the admitted requests: no
// reservation of a denied request is left behind.
func TestCrossTagReservationsNeverOverAdmit(t *testing.T) {
	budget := &limiter.Rule{Name: "campaign_budget", By: []string{"campaign"}, Limit: 40, Window: limiter.Window{Duration: time.Hour}}
	perRecipient := &limiter.Rule{Name: "recipient_minute", By: []string{"recipient"}, Limit: 3, Window: limiter.Window{Duration: time.Minute}}
	mk := func(g, i int) *limiter.Request {
		return limitertest.Req(time.Time{}, limitertest.Vals{"campaign": "spring-sale", "recipient": fmt.Sprint("u", (g*10+i)%25)}, budget, perRecipient)
	}
	// exact: the memory store decides all tags at once, so it admits
	// exactly the budget; reservations may deny a request for a moment
	// while another's reservation is rolled back, so they admit at most it.
	check := func(t *testing.T, s limiter.Store, admitted int64, exact bool) {
		t.Helper()
		if admitted > 40 || (exact && admitted != 40) || admitted < 30 {
			t.Fatalf("admitted %d, want 40 at most (exactly, when exact=%v); 25 recipients × 3 allow 75", admitted, exact)
		}
		d, err := s.Usage(context.Background(), limitertest.Req(time.Time{}, limitertest.Vals{"campaign": "spring-sale"}, budget))
		if err != nil {
			t.Fatal(err)
		}
		if d.Results[0].Used != admitted {
			t.Fatalf("budget log holds %d, admitted %d: reservations left behind", d.Results[0].Used, admitted)
		}
		var perUser int64
		for u := 0; u < 25; u++ {
			d, _ := s.Usage(context.Background(), limitertest.Req(time.Time{}, limitertest.Vals{"recipient": fmt.Sprint("u", u)}, perRecipient))
			if d.Results[0].Used > 3 {
				t.Fatalf("recipient u%d over its cap: %d", u, d.Results[0].Used)
			}
			perUser += d.Results[0].Used
		}
		if perUser != admitted {
			t.Fatalf("recipient logs hold %d, admitted %d: reservations left behind", perUser, admitted)
		}
	}
	t.Run("memory", func(t *testing.T) {
		m := memstore.New(memstore.Options{})
		defer m.Close()
		check(t, m, hammer(t, []limiter.Store{m}, 32, 10, mk), true)
	})
	t.Run("redis reservations", func(t *testing.T) {
		c := redistest.Client(t)
		// Split by hash tag as on a cluster, on a standalone server.
		a := New(c, Options{Timeout: 5 * time.Second})
		b := New(c, Options{Timeout: 5 * time.Second})
		a.cluster, b.cluster = true, true
		admitted := hammer(t, []limiter.Store{a, b}, 32, 10, mk)
		t.Logf("admitted %d of the budget 40", admitted)
		check(t, a, admitted, false)
	})
}
