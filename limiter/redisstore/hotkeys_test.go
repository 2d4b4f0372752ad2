package redisstore

import (
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// The hot keys cool down after their hold time and are never more than
// maxHot.
func TestHotKeysCoolDownAndStayBounded(t *testing.T) {
	clock := &limitertest.FixedClock{T: limitertest.MustParse(t, "2026-05-01T10:00:00Z")}
	h := newHotKeys(clock.Now, time.Second)
	p := limiter.GetPlan()
	defer p.Release()
	if err := p.Build("p:", limitertest.Req(clock.T, limitertest.Vals{"campaign": "x"}, &limiter.Rule{Name: "r", By: []string{"campaign"}, Limit: 1, Window: limiter.Window{Duration: time.Minute}}), clock.T); err != nil {
		t.Fatal(err)
	}
	batch := []*call{{p: p}}
	h.mark(string(p.Key(&p.Sections[0])))
	if !h.touches(batch) {
		t.Fatal("a key just marked is not hot")
	}
	clock.T = clock.T.Add(time.Second)
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

// split sends to the script only the calls of a hot key's component: the
// calls that read it and, through shared keys, every call linked to them,
// wherever they stand in the batch; the rest stay in Go, in order. With
// no hot key the batch is returned as it is.
func TestHotKeysSplitTakesOnlyTheHotComponent(t *testing.T) {
	clock := &limitertest.FixedClock{T: limitertest.MustParse(t, "2026-05-01T10:00:00Z")}
	h := newHotKeys(clock.Now, time.Second)
	recipient := &limiter.Rule{Name: "r", By: []string{"recipient"}, Limit: 5, Window: limiter.Window{Duration: time.Minute}}
	campaign := &limiter.Rule{Name: "c", By: []string{"campaign"}, Limit: 5, Window: limiter.Window{Duration: time.Minute}}
	// Each call reads its recipient's key and, when it has one, its
	// campaign's.
	mk := func(who, camp string) *call {
		p := limiter.GetPlan()
		t.Cleanup(p.Release)
		rules := []*limiter.Rule{recipient}
		if camp != "" {
			rules = append(rules, campaign)
		}
		if err := p.Build("p:", limitertest.Req(clock.T, limitertest.Vals{"recipient": who, "campaign": camp}, rules...), clock.T); err != nil {
			t.Fatal(err)
		}
		return &call{p: p}
	}
	// a links to the hot b only through d, which comes after it: a key
	// added late must reach calls before it.
	a, b, c, d, e := mk("a", "x"), mk("b", ""), mk("c", ""), mk("b", "x"), mk("e", "")
	batch := []*call{a, b, c, d, e}
	if hot, rest := h.split(batch); hot != nil || len(rest) != len(batch) {
		t.Fatalf("no hot key: %d scripted, %d in Go", len(hot), len(rest))
	}
	h.mark(limiter.KeyFor("p:", "recipient", "b"))
	hot, rest := h.split(batch)
	same := func(got, want []*call) bool {
		if len(got) != len(want) {
			return false
		}
		for i := range got {
			if got[i] != want[i] {
				return false
			}
		}
		return true
	}
	if !same(hot, []*call{a, b, d}) || !same(rest, []*call{c, e}) {
		t.Fatalf("scripted %v, in Go %v: want a, b, d and c, e", names(hot), names(rest))
	}
	clock.T = clock.T.Add(time.Second)
	if hot, _ := h.split(batch); hot != nil {
		t.Fatal("a key past its hold time still sends calls to the script")
	}
}

// names lists the first key each call reads, for failure messages.
func names(calls []*call) []string {
	var out []string
	for _, c := range calls {
		out = append(out, string(c.p.Key(&c.p.Sections[0])))
	}
	return out
}

// Single sends that meet a hot key in their lane batch: only the hot
// recipient's decisions go to the script, the others' are decided in Go,
// and every count is exact.
func TestHotKeySendsOnlyItsDecisionsToTheScript(t *testing.T) {
	rule := &limiter.Rule{Name: "hour", By: []string{"recipient"}, Limit: 3, Window: limiter.Window{Duration: time.Hour}}
	at := limitertest.MustParse(t, "2026-05-01T10:00:00Z")
	c := redistest.Client(t)
	const prefix = "hot-split:"
	// GoBatchMin 1: no batch goes to the script for being small; one
	// batch in flight: no two batches of this store race on a key and
	// make another key hot by a conflict. So only the hot key sends
	// decisions there.
	s := New(c, Options{Timeout: 5 * time.Second, Prefix: prefix, GoBatchMin: 1, InFlight: 1})
	defer s.Close()
	sent := &sentCommands{}
	c.AddHook(sent)
	hot := limiter.KeyFor(prefix, "recipient", "r3")
	s.hot.mark(hot)
	burst(t, s, at, rule, 8, 5)
	if n := s.Conflicts(); n != 0 {
		t.Fatalf("%d writes conflicted: the test needs none", n)
	}
	sent.mu.Lock()
	defer sent.mu.Unlock()
	if len(sent.scriptKeyNames) == 0 {
		t.Fatal("no decision of the hot recipient went to the script")
	}
	for _, k := range sent.scriptKeyNames {
		if k != hot {
			t.Fatalf("the script decided %s beside the hot %s: want only the hot key's decisions there", k, hot)
		}
	}
}

// burst sends each single sends to each of recipients r0, r1, … at once,
// all at at, and checks that exactly rule's limit of each recipient's
// were admitted.
func burst(t *testing.T, s limiter.Store, at time.Time, rule *limiter.Rule, recipients, each int) {
	t.Helper()
	admitted := make([]atomic.Int64, recipients)
	var wg sync.WaitGroup
	for i := 0; i < each; i++ {
		for who := range admitted {
			wg.Add(1)
			go func() {
				defer wg.Done()
				d := limitertest.MustDecide(t, s, limitertest.Req(at, limitertest.Vals{"recipient": "r" + strconv.Itoa(who)}, rule))
				if d.Allowed {
					admitted[who].Add(1)
				}
			}()
		}
	}
	wg.Wait()
	want := min(rule.Limit, int64(each))
	for who := range admitted {
		if got := admitted[who].Load(); got != want {
			t.Errorf("r%d: %d of %d sends admitted, want %d", who, got, each, want)
		}
	}
}
