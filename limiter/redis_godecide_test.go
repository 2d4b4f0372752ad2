package limiter

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// A decision made in Go whose key another gateway writes between the read
// and the write is not lost and does not overwrite the other's record: the
// write finds the key changed, writes nothing, and the script decides
// again, counting both.
func TestGoDecisionConflictFallsBackToScript(t *testing.T) {
	c := redistest.Client(t)
	rules := seedRules()
	at := mustParse(t, "2026-05-01T10:00:00Z")
	s := NewRedis(c, RedisOptions{Timeout: 5 * time.Second, GoBatchMin: 1})
	defer s.Close()
	oc := redis.NewClient(c.Options())
	defer oc.Close()
	other := NewRedis(oc, RedisOptions{Timeout: 5 * time.Second, ScriptOnly: true})
	defer other.Close()
	c.AddHook(&beforeCommit{f: func() {
		if d := mustDecide(t, other, req(at, vals{"recipient": "ann", "content": "a"}, rules...)); !d.Allowed {
			t.Errorf("the other gateway's decision was denied: %s", describe(d))
		}
	}})
	d := mustDecide(t, s, req(at.Add(time.Millisecond), vals{"recipient": "ann", "content": "b"}, rules...))
	if !d.Allowed || d.Results[0].Used != 2 {
		t.Fatalf("want admitted with recipient_minute used 2 (the other's record and this one), got %s", describe(d))
	}
	if n := s.conflicts.Load(); n != 1 {
		t.Fatalf("conflicts = %d, want 1", n)
	}
	u := mustUsage(t, s, req(at.Add(time.Second), vals{"recipient": "ann", "content": "a"}, rules...))
	if u.Results[1].Used != 2 || u.Results[3].Used != 1 {
		t.Fatalf("the log should hold both records, one for content a: %s", describe(u))
	}
}

// beforeCommit is a client hook that runs f once, before the first
// pipeline that carries a commit.lua write: between a batch's read and its
// write.
type beforeCommit struct {
	once sync.Once
	f    func()
}

func (h *beforeCommit) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (h *beforeCommit) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (h *beforeCommit) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for _, c := range cmds {
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
	rule := &Rule{Name: "one", By: []string{"recipient"}, Limit: 1, Window: Window{Duration: time.Minute}}
	s := NewRedis(c, RedisOptions{Timeout: 5 * time.Second, GoBatchMin: 1})
	defer s.Close()
	at := mustParse(t, "2026-05-01T10:00:00Z")
	mustDecide(t, s, req(at, vals{"recipient": "bo"}, rule))
	key := keyFor("freqcap:", "recipient", "bo")
	before := c.Get(context.Background(), key).Val()
	if d := mustDecide(t, s, req(at.Add(time.Second), vals{"recipient": "bo"}, rule)); d.Allowed {
		t.Fatal("second request admitted over a limit of 1")
	}
	if after := c.Get(context.Background(), key).Val(); after != before {
		t.Fatalf("a denial changed the value: %x -> %x", before, after)
	}
}

// decodeBlob reads what encodeBlob writes, for every kind of sub-log the
// script writes: plain, weighted, with tombs, with a floor, wide gaps.
func TestBlobRoundTrip(t *testing.T) {
	k := keyLogs{subs: []namedLog{
		{id: []byte(""), subLog: subLog{retention: 86_400_000, entries: []entry{{1000, 1}, {5000, 1}, {9000, 1}}}},
		{id: []byte("content=x"), subLog: subLog{retention: 59_000, entries: []entry{{7000, 3}, {8000, 1}}, tombs: []int64{7500}}},
		{id: []byte("$coins"), subLog: subLog{retention: 100 * 86_400_000, entries: []entry{{1, 2}, {90 * 86_400_000, 5}}, floor: 1}},
		{id: []byte("gone"), subLog: subLog{retention: 1000, floor: 42}},
	}}
	blob, err := encodeBlob(nil, &k)
	if err != nil {
		t.Fatal(err)
	}
	var got keyLogs
	if err := decodeBlob(blob, &got); err != nil {
		t.Fatal(err)
	}
	again, _ := encodeBlob(nil, &got)
	if !bytes.Equal(blob, again) || len(got.subs) != len(k.subs) {
		t.Fatalf("round trip changed the value:\n%x\n%x", blob, again)
	}
	for i := range k.subs {
		a, b := &k.subs[i], &got.subs[i]
		if !bytes.Equal(a.id, b.id) || a.retention != b.retention || a.floor != b.floor || len(a.entries) != len(b.entries) || len(a.tombs) != len(b.tombs) {
			t.Fatalf("sub-log %d: %+v became %+v", i, a, b)
		}
		for j := range a.entries {
			if a.entries[j] != b.entries[j] {
				t.Fatalf("sub-log %d entry %d: %v became %v", i, j, a.entries[j], b.entries[j])
			}
		}
	}
}

// A value that is not a log (truncated, or anything at all) is an error,
// never a panic; what decodes encodes back to the same bytes' meaning.
func FuzzDecodeBlob(f *testing.F) {
	k := keyLogs{subs: []namedLog{{id: []byte("c=1"), subLog: subLog{retention: 60_000, entries: []entry{{10, 1}, {20, 4}}, tombs: []int64{15}, floor: 5}}}}
	good, _ := encodeBlob(nil, &k)
	f.Add(good)
	f.Add(good[:len(good)-1])
	f.Add([]byte("x"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var k keyLogs
		if decodeBlob(b, &k) != nil {
			return
		}
		again, err := encodeBlob(nil, &k)
		if err != nil {
			return
		}
		var k2 keyLogs
		if err := decodeBlob(again, &k2); err != nil {
			t.Fatalf("re-encoded value does not decode: %v", err)
		}
		third, _ := encodeBlob(nil, &k2)
		if !bytes.Equal(again, third) {
			t.Fatalf("encoding is not stable:\n%x\n%x", again, third)
		}
	})
}

// A key that every request writes (a per-campaign count) makes writes from
// Go conflict, between batches in flight and between gateways. After a
// conflict the key is hot, and the batches that touch it go to the script
// for a while: few writes fail, and every admission is counted once.
func TestHotKeyGoesToScript(t *testing.T) {
	c := redistest.Client(t)
	rule := &Rule{Name: "campaign_hour", By: []string{"campaign"}, Limit: 1000, Window: Window{Duration: time.Hour}}
	a := NewRedis(c, RedisOptions{Timeout: 5 * time.Second, GoBatchMin: 1})
	defer a.Close()
	b := NewRedis(c, RedisOptions{Timeout: 5 * time.Second, GoBatchMin: 1})
	defer b.Close()
	mk := func(g, i int) *Request { return req(time.Time{}, vals{"campaign": "spring"}, rule) }
	admitted := hammer(t, []Store{a, b}, 32, 30, mk)
	if admitted != 960 {
		t.Fatalf("admitted %d of 960 under a limit of 1000", admitted)
	}
	if u := mustUsage(t, a, req(time.Time{}, vals{"campaign": "spring"}, rule)); u.Results[0].Used != admitted {
		t.Fatalf("the log holds %d, admitted %d", u.Results[0].Used, admitted)
	}
	conflicts := a.conflicts.Load() + b.conflicts.Load()
	t.Logf("960 decisions on one key from two gateways: %d writes from Go conflicted", conflicts)
	if conflicts > 16 {
		t.Fatalf("%d conflicts: a hot key should send its batches to the script", conflicts)
	}
}

// The hot keys cool down after their hold time and are never more than
// maxHot.
func TestHotKeysCoolDownAndStayBounded(t *testing.T) {
	clock := &fixedClock{t: mustParse(t, "2026-05-01T10:00:00Z")}
	h := newHotKeys(clock.now, time.Second)
	p := getPlan()
	defer p.release()
	if err := p.build("p:", req(clock.t, vals{"campaign": "x"}, &Rule{Name: "r", By: []string{"campaign"}, Limit: 1, Window: Window{Duration: time.Minute}}), clock.t); err != nil {
		t.Fatal(err)
	}
	batch := []*call{{p: p}}
	h.mark(string(p.key(&p.sections[0])))
	if !h.touches(batch) {
		t.Fatal("a key just marked is not hot")
	}
	clock.t = clock.t.Add(time.Second)
	if h.touches(batch) || len(h.until) != 0 {
		t.Fatal("a key past its hold time is still hot")
	}
	for i := 0; i < 3*maxHot; i++ {
		h.mark(strconv.Itoa(i))
	}
	if len(h.until) > maxHot {
		t.Fatalf("%d hot keys remembered, at most %d", len(h.until), maxHot)
	}
}

// A value that is not a log fails the decisions that read it, and only
// them: another recipient's decision in the same batch goes through.
func TestCorruptKeyFailsOnlyItsDecisions(t *testing.T) {
	c := redistest.Client(t)
	s := NewRedis(c, RedisOptions{Timeout: 5 * time.Second, GoBatchMin: 1})
	defer s.Close()
	rules := seedRules()
	if err := c.Set(context.Background(), keyFor("freqcap:", "recipient", "bad"), "not a log", 0).Err(); err != nil {
		t.Fatal(err)
	}
	at := mustParse(t, "2026-05-01T10:00:00Z")
	var calls []*call
	for _, who := range []string{"bad", "good"} {
		w := getRedisWork()
		if err := w.plan.build("freqcap:", req(at, vals{"recipient": who, "content": "c"}, rules...), at); err != nil {
			t.Fatal(err)
		}
		calls = append(calls, s.calls(w, opDecide, at.UnixMilli())...)
	}
	held := s.roundTrip(nil, calls) // one batch: read and decide
	s.roundTrip(held, nil)          // its write
	if calls[0].err == nil || !errors.Is(calls[0].err, ErrStore) {
		t.Fatalf("the decision on the corrupt key: err %v, want ErrStore", calls[0].err)
	}
	if calls[1].err != nil || calls[1].reply[0] != 1 {
		t.Fatalf("the other recipient's decision: err %v, reply %v; want admitted", calls[1].err, calls[1].reply)
	}
}

// A request with no checks is admitted, as by the memory store.
func TestNoChecksAdmitted(t *testing.T) {
	s := NewRedis(redistest.Client(t), RedisOptions{Timeout: 5 * time.Second, GoBatchMin: 1})
	defer s.Close()
	d, err := s.Decide(context.Background(), &Request{})
	if err != nil || !d.Allowed {
		t.Fatalf("no checks: %v, %v; want admitted", d, err)
	}
}

// A log refuses a refund past maxEntries tombs: more could not be stored,
// and a log that cannot be stored would lose every record it holds.
func TestRefundsStopAtMaxTombs(t *testing.T) {
	l := subLog{retention: 86_400_000, tombs: make([]int64, maxEntries)}
	l.entries = []entry{{t: 5000, c: 1}}
	if l.refund(5000, 1, 0, 6000) {
		t.Fatal("refund accepted past maxEntries tombs")
	}
	l.tombs = l.tombs[:maxEntries-1]
	if !l.refund(5000, 1, 0, 6000) {
		t.Fatal("refund refused below maxEntries tombs")
	}
}

// Rules whose shared log could hold more records than a value can are
// refused when configured.
func TestCheckLogs(t *testing.T) {
	burst := &Rule{Name: "burst", By: []string{"campaign"}, Limit: 2000, Window: Window{Duration: 5 * time.Second}}
	day := &Rule{Name: "day", By: []string{"campaign"}, Limit: 100_000, Window: Window{Duration: 24 * time.Hour}}
	if err := CheckLogs([]*Rule{burst, day}); err == nil {
		t.Fatal("a 5 s window (exact records) beside a limit of 100,000 was accepted")
	}
	if err := CheckLogs([]*Rule{day}); err != nil {
		t.Fatalf("a bucketed day log was refused: %v", err)
	}
	if err := CheckLogs(seedRules()); err != nil {
		t.Fatalf("the seed config was refused: %v", err)
	}
}

// Closing the store while decisions are in flight loses none that was
// admitted: Close waits for the batches' writes, and a decision queued as
// the store closes fails at once instead of at its timeout.
func TestCloseKeepsAdmittedDecisions(t *testing.T) {
	c := redistest.Client(t)
	rule := &Rule{Name: "many", By: []string{"recipient"}, Limit: 10_000, Window: Window{Duration: time.Hour}}
	at := mustParse(t, "2026-05-01T10:00:00Z")
	for round := 0; round < 5; round++ {
		who := "closing" + strconv.Itoa(round)
		s := NewRedis(c, RedisOptions{Timeout: 5 * time.Second, GoBatchMin: 1})
		var admitted atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for g := 0; g < 64; g++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d, err := s.Decide(context.Background(), req(at, vals{"recipient": who}, rule))
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
		check := NewRedis(c, RedisOptions{Timeout: 5 * time.Second, GoBatchMin: 1})
		u := mustUsage(t, check, req(at, vals{"recipient": who}, rule))
		check.Close()
		if u.Results[0].Used != admitted.Load() {
			t.Fatalf("round %d: %d decisions admitted, %d recorded", round, admitted.Load(), u.Results[0].Used)
		}
	}
}
