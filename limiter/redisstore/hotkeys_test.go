package redisstore

import (
	"strconv"
	"testing"
	"time"

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
