package limiter

import (
	"strconv"
	"testing"
	"time"
)

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
