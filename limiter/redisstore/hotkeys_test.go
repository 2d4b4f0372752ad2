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
