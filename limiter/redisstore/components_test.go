package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// A batch send under drop (BatchEach) whose write finds one recipient's key
// changed by another gateway keeps every other entry as decided in Go: only
// the entries that share keys with the changed one (here the recipient's two
// entries) are decided again in the script, the key is hot, and every count
// is exact. Under reject (BatchAll) the batch is one whole: all of it goes
// to the script.
func TestBatchConflictRedecidesOnlyItsComponent(t *testing.T) {
	rule := &limiter.Rule{Name: "hour", By: []string{"recipient"}, Limit: 100, Window: limiter.Window{Duration: time.Hour}}
	at := limitertest.MustParse(t, "2026-05-01T10:00:00Z")
	for _, tc := range []struct {
		mode limiter.BatchMode
		// keys the script run is given: the changed recipient's one, or
		// all ten.
		scriptKeys int
	}{{limiter.BatchEach, 1}, {limiter.BatchAll, 10}} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			c := redistest.Client(t)
			prefix := "components-" + tc.mode.String() + ":"
			s := New(c, Options{Timeout: 5 * time.Second, Prefix: prefix})
			defer s.Close()
			other := New(redis.NewClient(c.Options()), Options{Timeout: 5 * time.Second, Prefix: prefix, ScriptOnly: true})
			defer other.Close()
			if err := freqcapScript.Load(context.Background(), c).Err(); err != nil {
				t.Fatal(err)
			}
			sent := &sentCommands{}
			c.AddHook(sent)
			c.AddHook(&beforeCommit{f: func() {
				limitertest.MustDecide(t, other, limitertest.Req(at, limitertest.Vals{"recipient": "r3"}, rule))
			}})

			var reqs []limiter.Request
			for i := 0; i < 10; i++ {
				reqs = append(reqs, *limitertest.Req(at, limitertest.Vals{"recipient": "r" + strconv.Itoa(i)}, rule))
			}
			reqs = append(reqs, *limitertest.Req(at, limitertest.Vals{"recipient": "r3"}, rule)) // r3 twice
			for i, d := range limitertest.MustBatch(t, s, reqs, tc.mode) {
				if !d.Allowed {
					t.Fatalf("entry %d denied under a limit of 100: %s", i, limitertest.Describe(d))
				}
			}
			if n := s.Conflicts(); n != 1 {
				t.Errorf("conflicts = %d, want 1", n)
			}
			s.hot.mu.Lock()
			_, hot := s.hot.until[limiter.KeyFor(prefix, "recipient", "r3")]
			s.hot.mu.Unlock()
			if !hot {
				t.Error("r3's key is not hot after its conflict")
			}
			sent.mu.Lock()
			got := sent.scriptKeys
			sent.mu.Unlock()
			if len(got) != 1 || got[0] != tc.scriptKeys {
				t.Errorf("script runs with %v keys, want one with %d", got, tc.scriptKeys)
			}
			for i := 0; i < 10; i++ {
				want := int64(1)
				if i == 3 {
					want = 3 // the other gateway's and the batch's two
				}
				u := limitertest.MustUsage(t, s, limitertest.Req(at, limitertest.Vals{"recipient": "r" + strconv.Itoa(i)}, rule))
				if u.Results[0].Used != want {
					t.Errorf("r%d counts %d, want %d", i, u.Results[0].Used, want)
				}
			}
		})
	}
}

// A batch send under reject whose write conflicts goes whole to the script,
// and one too large for a script run (here 300 rule specs, past 255) is run
// in parts. A denial in the last part must then take back what the first
// recorded: nothing of the batch stays counted.
func TestBatchAllConflictInPartsRecordsNothingWhenDenied(t *testing.T) {
	c := redistest.Client(t)
	// The rollback's refund prunes at the server's time, as a refund does:
	// the batch is sent at it.
	at := time.Now()
	const n = 300
	rules := make([]*limiter.Rule, n)
	for i := range rules {
		// distinct limits, so that every entry is a rule spec of its own;
		// the last entry's recipient takes one send
		rules[i] = &limiter.Rule{Name: "hour", By: []string{"recipient"}, Limit: int64(1000 + i), Window: limiter.Window{Duration: time.Hour}}
	}
	rules[n-1].Limit = 1
	prefix := "parts:"
	s := New(c, Options{Timeout: 5 * time.Second, Prefix: prefix})
	defer s.Close()
	other := New(redis.NewClient(c.Options()), Options{Timeout: 5 * time.Second, Prefix: prefix, ScriptOnly: true})
	defer other.Close()
	last := func() *limiter.Request {
		return limitertest.Req(at, limitertest.Vals{"recipient": fmt.Sprint("r", n-1)}, rules[n-1])
	}
	c.AddHook(&beforeCommit{f: func() { limitertest.MustDecide(t, other, last()) }})

	var reqs []limiter.Request
	for i := 0; i < n; i++ {
		reqs = append(reqs, *limitertest.Req(at, limitertest.Vals{"recipient": fmt.Sprint("r", i)}, rules[i]))
	}
	ds := limitertest.MustBatch(t, s, reqs, limiter.BatchAll)
	if ds[n-1].Allowed {
		t.Fatalf("the last entry admitted past its limit: %s", limitertest.Describe(ds[n-1]))
	}
	if n := s.Conflicts(); n != 1 {
		t.Fatalf("conflicts = %d, want 1: the test did not reach the script", n)
	}
	for i := 0; i < n-1; i++ {
		if u := limitertest.MustUsage(t, s, limitertest.Req(at, limitertest.Vals{"recipient": fmt.Sprint("r", i)}, rules[i])); u.Results[0].Used != 0 {
			t.Errorf("r%d counts %d of a denied batch, want 0", i, u.Results[0].Used)
		}
	}
	if u := limitertest.MustUsage(t, s, last()); u.Results[0].Used != 1 {
		t.Errorf("r%d counts %d, want the other gateway's 1", n-1, u.Results[0].Used)
	}
}

// A batch send whose caller has already gone is not sent: it fails with the
// caller's error and records nothing, in either mode.
func TestBatchSendForAGoneCallerRecordsNothing(t *testing.T) {
	c := redistest.Client(t)
	rule := &limiter.Rule{Name: "hour", By: []string{"recipient"}, Limit: 10, Window: limiter.Window{Duration: time.Hour}}
	at := time.Now()
	s := New(c, Options{Timeout: 5 * time.Second, Prefix: "gone:"})
	defer s.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	var reqs []limiter.Request
	for i := 0; i < 100; i++ {
		reqs = append(reqs, *limitertest.Req(at, limitertest.Vals{"recipient": fmt.Sprint("r", i)}, rule))
	}
	for _, mode := range []limiter.BatchMode{limiter.BatchAll, limiter.BatchEach} {
		if _, err := s.DecideBatch(ctx, reqs, mode); err == nil {
			t.Fatalf("%s: a batch for a cancelled caller was decided", mode)
		}
	}
	time.Sleep(50 * time.Millisecond) // a write sent regardless would have landed
	for i := range reqs {
		if u := limitertest.MustUsage(t, s, &reqs[i]); u.Results[0].Used != 0 {
			t.Fatalf("entry %d counts %d sends of a gone caller, want 0", i, u.Results[0].Used)
		}
	}
}

// Two gateways sending batch sends under drop to the same recipients at
// once conflict often; every admission is still counted once, and nothing
// is admitted past the limit.
func TestBatchSendsFromTwoGatewaysCountExactly(t *testing.T) {
	c := redistest.Client(t)
	rule := &limiter.Rule{Name: "hour", By: []string{"recipient"}, Limit: 30, Window: limiter.Window{Duration: time.Hour}}
	at := limitertest.MustParse(t, "2026-05-01T10:00:00Z")
	gateways := gatewaysOn(t, c, 2, "two-gateways:")
	const senders, rounds, recipients = 4, 10, 40
	admitted := make([]int64, recipients)
	var mu sync.Mutex
	sendBatches(t, gateways, senders, rounds, func(w int) []limiter.Request {
		var reqs []limiter.Request
		for i := 0; i < recipients; i++ {
			reqs = append(reqs, *limitertest.Req(at, limitertest.Vals{"recipient": fmt.Sprint("r", (i+w*7)%recipients)}, rule))
		}
		return reqs
	}, func(w int, ds []*limiter.Decision) {
		mu.Lock()
		defer mu.Unlock()
		for i, d := range ds {
			if d.Allowed {
				admitted[(i+w*7)%recipients]++
			}
		}
	})
	t.Logf("conflicts: %d and %d", gateways[0].Conflicts(), gateways[1].Conflicts())
	for i := 0; i < recipients; i++ {
		u := limitertest.MustUsage(t, gateways[0], limitertest.Req(at, limitertest.Vals{"recipient": fmt.Sprint("r", i)}, rule))
		if u.Results[0].Used != admitted[i] || admitted[i] != 30 {
			t.Errorf("r%d: admitted %d, counted %d; want 30 of 40 sends admitted and counted", i, admitted[i], u.Results[0].Used)
		}
	}
}

// A hot key (one whose write from Go recently conflicted) sends a batch send
// under reject to the script at once, but one under drop only when most of
// its entries read hot keys: otherwise the batch is decided in Go, and a
// conflict on the hot key would send only its entries to the script.
func TestHotKeyInABatchSend(t *testing.T) {
	rule := &limiter.Rule{Name: "hour", By: []string{"recipient"}, Limit: 100, Window: limiter.Window{Duration: time.Hour}}
	at := limitertest.MustParse(t, "2026-05-01T10:00:00Z")
	c := redistest.Client(t)
	const prefix = "hot-batch:"
	s := New(c, Options{Timeout: 5 * time.Second, Prefix: prefix})
	defer s.Close()
	if err := freqcapScript.Load(context.Background(), c).Err(); err != nil {
		t.Fatal(err)
	}
	sent := &sentCommands{}
	c.AddHook(sent)
	batch := func(who ...string) []limiter.Request {
		var reqs []limiter.Request
		for _, w := range who {
			reqs = append(reqs, *limitertest.Req(at, limitertest.Vals{"recipient": w}, rule))
		}
		return reqs
	}
	ten := batch("r0", "r1", "r2", "r3", "r4", "r5", "r6", "r7", "r8", "r9")
	mostlyHot := batch("r3", "r3", "r3", "r3", "r3", "r3", "r1", "r2", "r4", "r5")
	for _, tc := range []struct {
		name string
		reqs []limiter.Request
		mode limiter.BatchMode
		// the keys of the script's run, or 0 for none (decided in Go)
		scriptKeys int
	}{
		{"one hot entry under drop", ten, limiter.BatchEach, 0},
		{"one hot entry under reject", ten, limiter.BatchAll, 10},
		{"mostly hot entries under drop", mostlyHot, limiter.BatchEach, 5},
	} {
		s.hot.mark(limiter.KeyFor(prefix, "recipient", "r3"))
		sent.mu.Lock()
		sent.scriptKeys = nil
		sent.mu.Unlock()
		limitertest.MustBatch(t, s, tc.reqs, tc.mode)
		sent.mu.Lock()
		got := sent.scriptKeys
		sent.mu.Unlock()
		switch {
		case tc.scriptKeys == 0 && len(got) != 0:
			t.Errorf("%s: script runs with %v keys, want it decided in Go", tc.name, got)
		case tc.scriptKeys > 0 && (len(got) != 1 || got[0] != tc.scriptKeys):
			t.Errorf("%s: script runs with %v keys, want one with %d", tc.name, got, tc.scriptKeys)
		}
	}
}

// A key every entry shares (a per-campaign count) makes batch sends from
// two gateways conflict; after the first conflict the key is hot and the
// batches that read it go to the script, so few writes fail, and every
// admission is counted once.
func TestSharedKeyInBatchSendsGoesHot(t *testing.T) {
	c := redistest.Client(t)
	rule := &limiter.Rule{Name: "campaign_hour", By: []string{"campaign"}, Limit: 1000, Window: limiter.Window{Duration: time.Hour}}
	gateways := gatewaysOn(t, c, 2, "shared-key:")
	const senders, rounds, entries = 4, 10, 20
	sendBatches(t, gateways, senders, rounds, func(int) []limiter.Request {
		reqs := make([]limiter.Request, entries)
		for i := range reqs {
			reqs[i] = *limitertest.Req(time.Time{}, limitertest.Vals{"campaign": "spring"}, rule)
		}
		return reqs
	}, nil)
	if u := limitertest.MustUsage(t, gateways[0], limitertest.Req(time.Time{}, limitertest.Vals{"campaign": "spring"}, rule)); u.Results[0].Used != senders*rounds*entries {
		t.Fatalf("the campaign counts %d, want %d", u.Results[0].Used, senders*rounds*entries)
	}
	conflicts := gateways[0].Conflicts() + gateways[1].Conflicts()
	t.Logf("%d batch sends on one key from two gateways: %d writes from Go conflicted", senders*rounds, conflicts)
	if conflicts > 12 {
		t.Fatalf("%d conflicts: the shared key should send its batches to the script", conflicts)
	}
}

// gatewaysOn returns n stores on c's Redis, each on a client of its own,
// as n gateways are; the test closes them.
func gatewaysOn(t *testing.T, c *redis.Client, n int, prefix string) []*Store {
	var gateways []*Store
	for g := 0; g < n; g++ {
		s := New(redis.NewClient(c.Options()), Options{Timeout: 5 * time.Second, Prefix: prefix})
		t.Cleanup(func() { s.Close() })
		gateways = append(gateways, s)
	}
	return gateways
}

// sendBatches has senders goroutines send rounds batch sends each under
// BatchEach, sender w through gateways[w%len(gateways)], each batch built
// by build(w); got, when not nil, takes each answer on the sender's
// goroutine. A failed batch fails the test and stops its sender.
func sendBatches(t *testing.T, gateways []*Store, senders, rounds int, build func(w int) []limiter.Request, got func(w int, ds []*limiter.Decision)) {
	var wg sync.WaitGroup
	for w := 0; w < senders; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for round := 0; round < rounds; round++ {
				ds, err := gateways[w%len(gateways)].DecideBatch(context.Background(), build(w), limiter.BatchEach)
				if err != nil {
					t.Error(err)
					return
				}
				if got != nil {
					got(w, ds)
				}
			}
		}()
	}
	wg.Wait()
}
