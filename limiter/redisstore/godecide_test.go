package redisstore

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// A decision made in Go whose key another gateway writes between the read
// and the write is not lost and does not overwrite the other's record: the
// write finds the key changed, writes nothing, and the script decides
// again, counting both.
func TestGoDecisionConflictFallsBackToScript(t *testing.T) {
	c := redistest.Client(t)
	rules := limitertest.SeedRules()
	at := limitertest.MustParse(t, "2026-05-01T10:00:00Z")
	s := New(c, Options{Timeout: 5 * time.Second, GoBatchMin: 1})
	defer s.Close()
	oc := redis.NewClient(c.Options())
	defer oc.Close()
	other := New(oc, Options{Timeout: 5 * time.Second, ScriptOnly: true})
	defer other.Close()
	c.AddHook(&beforeCommit{f: func() {
		if d := limitertest.MustDecide(t, other, limitertest.Req(at, limitertest.Vals{"recipient": "ann", "content": "a"}, rules...)); !d.Allowed {
			t.Errorf("the other gateway's decision was denied: %s", limitertest.Describe(d))
		}
	}})
	d := limitertest.MustDecide(t, s, limitertest.Req(at.Add(time.Millisecond), limitertest.Vals{"recipient": "ann", "content": "b"}, rules...))
	if !d.Allowed || d.Results[0].Used != 2 {
		t.Fatalf("want admitted with recipient_minute used 2 (the other's record and this one), got %s", limitertest.Describe(d))
	}
	if n := s.conflicts.Load(); n != 1 {
		t.Fatalf("conflicts = %d, want 1", n)
	}
	u := limitertest.MustUsage(t, s, limitertest.Req(at.Add(time.Second), limitertest.Vals{"recipient": "ann", "content": "a"}, rules...))
	if u.Results[1].Used != 2 || u.Results[3].Used != 1 {
		t.Fatalf("the log should hold both records, one for content a: %s", limitertest.Describe(u))
	}
}

// beforeCommit is a client hook that runs f once, before the first
// pipeline that carries a commit.lua write or a native one (SET … IFEQ or
// NX): between a batch's read and its write.
type beforeCommit struct {
	once sync.Once
	f    func()
}

func (h *beforeCommit) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *beforeCommit) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *beforeCommit) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
			if isNativeWrite(c) {
				h.once.Do(h.f)
			}
			if c.Name() != "evalsha" {
				continue
			}
			if sha, _ := c.Args()[1].(string); sha == commitScript.Hash() {
				h.once.Do(h.f)
			}
		}
		return next(ctx, cmds)
	}
}

// Decisions made in Go and denied write nothing: no commit, so no key.
func TestGoDenialWritesNothing(t *testing.T) {
	c := redistest.Client(t)
	rule := &limiter.Rule{Name: "one", By: []string{"recipient"}, Limit: 1, Window: limiter.Window{Duration: time.Minute}}
	s := New(c, Options{Timeout: 5 * time.Second, GoBatchMin: 1})
	defer s.Close()
	at := limitertest.MustParse(t, "2026-05-01T10:00:00Z")
	limitertest.MustDecide(t, s, limitertest.Req(at, limitertest.Vals{"recipient": "bo"}, rule))
	key := limiter.KeyFor("freqcap:", "recipient", "bo")
	before := c.Get(context.Background(), key).Val()
	if d := limitertest.MustDecide(t, s, limitertest.Req(at.Add(time.Second), limitertest.Vals{"recipient": "bo"}, rule)); d.Allowed {
		t.Fatal("second request admitted over a limit of 1")
	}
	if after := c.Get(context.Background(), key).Val(); after != before {
		t.Fatalf("a denial changed the value: %x -> %x", before, after)
	}
}

// A key that every request writes (a per-campaign count) makes writes from
// Go conflict, between batches in flight and between gateways. After a
// conflict the key is hot, and the batches that touch it go to the script
// for a while: few writes fail, and every admission is counted once.
func TestHotKeyGoesToScript(t *testing.T) {
	c := redistest.Client(t)
	rule := &limiter.Rule{Name: "campaign_hour", By: []string{"campaign"}, Limit: 1000, Window: limiter.Window{Duration: time.Hour}}
	a := New(c, Options{Timeout: 5 * time.Second, GoBatchMin: 1})
	defer a.Close()
	b := New(c, Options{Timeout: 5 * time.Second, GoBatchMin: 1})
	defer b.Close()
	mk := func(g, i int) *limiter.Request {
		return limitertest.Req(time.Time{}, limitertest.Vals{"campaign": "spring"}, rule)
	}
	admitted := hammer(t, []limiter.Store{a, b}, 32, 30, mk)
	if admitted != 960 {
		t.Fatalf("admitted %d of 960 under a limit of 1000", admitted)
	}
	if u := limitertest.MustUsage(t, a, limitertest.Req(time.Time{}, limitertest.Vals{"campaign": "spring"}, rule)); u.Results[0].Used != admitted {
		t.Fatalf("the log holds %d, admitted %d", u.Results[0].Used, admitted)
	}
	conflicts := a.conflicts.Load() + b.conflicts.Load()
	t.Logf("960 decisions on one key from two gateways: %d writes from Go conflicted", conflicts)
	if conflicts > 16 {
		t.Fatalf("%d conflicts: a hot key should send its batches to the script", conflicts)
	}
}

// A value that is not a log fails the decisions that read it, and only
// them: another recipient's decision in the same batch goes through.
func TestCorruptKeyFailsOnlyItsDecisions(t *testing.T) {
	c := redistest.Client(t)
	s := New(c, Options{Timeout: 5 * time.Second, GoBatchMin: 1})
	defer s.Close()
	rules := limitertest.SeedRules()
	if err := c.Set(context.Background(), limiter.KeyFor("freqcap:", "recipient", "bad"), "not a log", 0).Err(); err != nil {
		t.Fatal(err)
	}
	at := limitertest.MustParse(t, "2026-05-01T10:00:00Z")
	var calls []*call
	for _, who := range []string{"bad", "good"} {
		w := getRedisWork()
		if err := w.plan.Build("freqcap:", limitertest.Req(at, limitertest.Vals{"recipient": who, "content": "c"}, rules...), at); err != nil {
			t.Fatal(err)
		}
		calls = append(calls, s.calls(w, opDecide, at.UnixMilli())...)
	}
	held := s.roundTrip(nil, calls, false) // one batch: read and decide
	s.roundTrip(held, nil, false)          // its write
	if calls[0].err == nil || !errors.Is(calls[0].err, limiter.ErrStore) {
		t.Fatalf("the decision on the corrupt key: err %v, want ErrStore", calls[0].err)
	}
	if calls[1].err != nil || calls[1].reply[0] != 1 {
		t.Fatalf("the other recipient's decision: err %v, reply %v; want admitted", calls[1].err, calls[1].reply)
	}
}

// A request with no checks is admitted, as by the memory store.
func TestNoChecksAdmitted(t *testing.T) {
	s := New(redistest.Client(t), Options{Timeout: 5 * time.Second, GoBatchMin: 1})
	defer s.Close()
	d, err := s.Decide(context.Background(), &limiter.Request{})
	if err != nil || !d.Allowed {
		t.Fatalf("no checks: %v, %v; want admitted", d, err)
	}
}
