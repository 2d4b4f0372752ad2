package redisstore

import (
	"context"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// step is one request in a step table: at a time, with a cost; what the
// single rule under test must answer.
type step struct {
	at        time.Time
	cost      int64
	allowed   bool
	used      int64         // Used after the decision
	reset     time.Duration // Result.Reset
	retry     time.Duration // Decision.RetryAfter (denials only)
	zone      string        // recipient zone for calendar rules, "" for the rule's
	checkOnly bool          // Usage instead of Decide
}

func runSteps(t *testing.T, rule *limiter.Rule, steps []step) {
	t.Helper()
	storeKinds(t, func(t *testing.T, newStore func(func() time.Time) limiter.Store) {
		s := newStore(nil)
		for i, st := range steps {
			r := limitertest.Req(st.at, limitertest.Vals{"recipient": "alice", "content": "hi"}, rule)
			r.Checks[0].Cost = st.cost
			if st.zone != "" {
				r.Checks[0].Zone = limitertest.MustZone(t, st.zone)
			}
			var d *limiter.Decision
			if st.checkOnly {
				d = limitertest.MustUsage(t, s, r)
			} else {
				d = limitertest.MustDecide(t, s, r)
			}
			res := d.Results[0]
			if d.Allowed != st.allowed || res.Used != st.used || res.Reset != st.reset {
				t.Fatalf("step %d at %s: allowed=%v used=%d reset=%s; want allowed=%v used=%d reset=%s",
					i, st.at.Format(time.RFC3339Nano), d.Allowed, res.Used, res.Reset, st.allowed, st.used, st.reset)
			}
			if !st.allowed && (d.RetryAfter != st.retry || d.Denier != 0 || !res.Denied) {
				t.Fatalf("step %d: retry=%s denier=%d; want retry=%s denier=0", i, d.RetryAfter, d.Denier, st.retry)
			}
			if res.Remaining != max(0, rule.Limit-res.Used) {
				t.Fatalf("step %d: remaining %d with used %d of %d", i, res.Remaining, res.Used, rule.Limit)
			}
		}
	})
}

// A rolling window counts (now-D, now]: a record exactly D old is outside,
// one D-1ms old is inside, and Retry-After is when the oldest blocking
// record leaves.
func TestRollingEdges(t *testing.T) {
	t0 := limitertest.MustParse(t, "2026-03-01T10:00:00Z")
	ms := time.Millisecond
	rule := &limiter.Rule{Name: "r", By: []string{"recipient"}, Limit: 2, Window: limiter.Window{Duration: time.Minute}}
	runSteps(t, rule, []step{
		{at: t0, cost: 1, allowed: true, used: 1, reset: time.Minute},
		{at: t0.Add(10 * time.Second), cost: 1, allowed: true, used: 2, reset: 50 * time.Second},
		{at: t0.Add(20 * time.Second), cost: 1, allowed: false, used: 2, reset: 40 * time.Second, retry: 40 * time.Second},
		// 1 ms before the first record leaves: still full.
		{at: t0.Add(time.Minute - ms), cost: 1, allowed: false, used: 2, reset: ms, retry: ms},
		// Exactly one minute later the first record is outside.
		{at: t0.Add(time.Minute), cost: 1, allowed: true, used: 2, reset: 10 * time.Second},
		// Peeking records nothing.
		{at: t0.Add(time.Minute + ms), cost: 1, allowed: false, used: 2, reset: 10*time.Second - ms, retry: 10*time.Second - ms, checkOnly: true},
		{at: t0.Add(3 * time.Minute), cost: 0, allowed: true, used: 0, reset: 0, checkOnly: true},
	})
}

// A request costing more than one unit waits until enough records leave,
// and one costing more than the limit can never pass (Retry-After: a whole
// window).
func TestRollingCost(t *testing.T) {
	t0 := limitertest.MustParse(t, "2026-03-01T10:00:00Z")
	rule := &limiter.Rule{Name: "r", By: []string{"recipient"}, Limit: 10, Window: limiter.Window{Duration: time.Hour}, Weight: "{json.n}"}
	runSteps(t, rule, []step{
		{at: t0, cost: 4, allowed: true, used: 4, reset: time.Hour},
		{at: t0.Add(time.Minute), cost: 4, allowed: true, used: 8, reset: 59 * time.Minute},
		// needs 6 free: the first record frees 4, the second 4 more.
		{at: t0.Add(2 * time.Minute), cost: 8, allowed: false, used: 8, reset: 58 * time.Minute, retry: 59 * time.Minute},
		{at: t0.Add(2 * time.Minute), cost: 11, allowed: false, used: 8, reset: 58 * time.Minute, retry: time.Hour},
		{at: t0.Add(3 * time.Minute), cost: 2, allowed: true, used: 10, reset: 57 * time.Minute},
	})
}

// A calendar day in Asia/Shanghai (UTC+8) resets at 16:00 UTC.
func TestCalendarDayShanghai(t *testing.T) {
	rule := &limiter.Rule{Name: "d", By: []string{"recipient"}, Limit: 2, Window: limiter.Window{Unit: limiter.Day, Zone: limitertest.MustZone(t, "Asia/Shanghai")}}
	t0 := limitertest.MustParse(t, "2026-05-10T15:00:00Z") // 23:00 local
	runSteps(t, rule, []step{
		{at: t0, cost: 1, allowed: true, used: 1, reset: time.Hour},
		{at: t0.Add(30 * time.Minute), cost: 1, allowed: true, used: 2, reset: 30 * time.Minute},
		{at: t0.Add(59*time.Minute + 59*time.Second), cost: 1, allowed: false, used: 2, reset: time.Second, retry: time.Second},
		// local midnight: a new day
		{at: t0.Add(time.Hour), cost: 1, allowed: true, used: 1, reset: 24 * time.Hour},
	})
}

// New York's spring-forward day has 23 hours and its fall-back day 25; a
// day rule resets at local midnight all the same. A request may name the
// recipient's own zone, which replaces the rule's.
func TestCalendarDayNewYorkDST(t *testing.T) {
	rule := &limiter.Rule{Name: "d", By: []string{"recipient"}, Limit: 1, Window: limiter.Window{Unit: limiter.Day}}
	ny := "America/New_York"
	spring := limitertest.MustParse(t, "2026-03-08T05:00:00Z") // local midnight, EST: the 23-hour day
	fall := limitertest.MustParse(t, "2026-11-01T04:00:00Z")   // local midnight, EDT: the 25-hour day
	runSteps(t, rule, []step{
		{at: spring, cost: 1, allowed: true, used: 1, reset: 23 * time.Hour, zone: ny},
		{at: spring.Add(22 * time.Hour), cost: 1, allowed: false, used: 1, reset: time.Hour, retry: time.Hour, zone: ny},
		{at: spring.Add(23 * time.Hour), cost: 1, allowed: true, used: 1, reset: 24 * time.Hour, zone: ny},
		{at: fall, cost: 1, allowed: true, used: 1, reset: 25 * time.Hour, zone: ny},
		{at: fall.Add(24 * time.Hour), cost: 1, allowed: false, used: 1, reset: time.Hour, retry: time.Hour, zone: ny},
		{at: fall.Add(25 * time.Hour), cost: 1, allowed: true, used: 1, reset: 24 * time.Hour, zone: ny},
		// In the rule's own zone (UTC) the day of that last record ends at
		// 00:00Z, 19 hours later.
		{at: fall.Add(25 * time.Hour), cost: 1, allowed: false, used: 1, reset: 19 * time.Hour, retry: 19 * time.Hour},
	})
}

// Weeks start on Monday at local midnight.
func TestCalendarWeek(t *testing.T) {
	rule := &limiter.Rule{Name: "w", By: []string{"recipient"}, Limit: 1, Window: limiter.Window{Unit: limiter.Week, Zone: limitertest.MustZone(t, "Asia/Shanghai")}}
	sun := limitertest.MustParse(t, "2026-11-22T12:00:00+08:00") // a Sunday noon, local
	runSteps(t, rule, []step{
		{at: sun, cost: 1, allowed: true, used: 1, reset: 12 * time.Hour},
		{at: sun.Add(11 * time.Hour), cost: 1, allowed: false, used: 1, reset: time.Hour, retry: time.Hour},
		{at: sun.Add(12 * time.Hour), cost: 1, allowed: true, used: 1, reset: 7 * 24 * time.Hour},
	})
}

// Months of 28, 29, 30 and 31 days each reset on the first, local midnight.
func TestCalendarMonthLengths(t *testing.T) {
	for _, c := range []struct {
		start string
		days  int
	}{
		{"2026-02-01T00:00:00Z", 28},
		{"2028-02-01T00:00:00Z", 29},
		{"2026-04-01T00:00:00Z", 30},
		{"2026-01-01T00:00:00Z", 31},
	} {
		t.Run(c.start[:7], func(t *testing.T) {
			rule := &limiter.Rule{Name: "m", By: []string{"recipient"}, Limit: 1000, Window: limiter.Window{Unit: limiter.Month}, Weight: "{json.amount}"}
			start := limitertest.MustParse(t, c.start)
			month := time.Duration(c.days) * 24 * time.Hour
			runSteps(t, rule, []step{
				{at: start, cost: 600, allowed: true, used: 600, reset: month},
				{at: start.Add(month - time.Second), cost: 500, allowed: false, used: 600, reset: time.Second, retry: time.Second},
				{at: start.Add(month - time.Second), cost: 400, allowed: true, used: 1000, reset: time.Second},
				{at: start.Add(month), cost: 500, allowed: true, used: 500, reset: time.Duration(daysIn(start.AddDate(0, 1, 0))) * 24 * time.Hour},
			})
		})
	}
}

func daysIn(t time.Time) int { return t.AddDate(0, 1, -t.Day()).Day() }

// Every rule must admit; the denier is the rule that blocks longest, and a
// denial records nothing in any rule.
func TestAllOrNothing(t *testing.T) {
	t0 := limitertest.MustParse(t, "2026-03-01T10:00:00Z")
	storeKinds(t, func(t *testing.T, newStore func(func() time.Time) limiter.Store) {
		s := newStore(nil)
		rules := limitertest.SeedRules()
		v := limitertest.Vals{"recipient": "bob", "content": "same"}
		for i := 0; i < 2; i++ {
			if d := limitertest.MustDecide(t, s, limitertest.Req(t0.Add(time.Duration(i)*time.Second), v, rules...)); !d.Allowed {
				t.Fatalf("send %d denied", i)
			}
		}
		d := limitertest.MustDecide(t, s, limitertest.Req(t0.Add(2*time.Second), v, rules...))
		if d.Allowed || rules[d.Denier].Name != "same_content_59s" || d.RetryAfter != 57*time.Second {
			t.Fatalf("third same content: allowed=%v denier=%d retry=%s", d.Allowed, d.Denier, d.RetryAfter)
		}
		// Other content still passes, and the denial counted nowhere.
		d = limitertest.MustDecide(t, s, limitertest.Req(t0.Add(3*time.Second), limitertest.Vals{"recipient": "bob", "content": "other"}, rules...))
		if !d.Allowed || d.Results[0].Used != 3 || d.Results[1].Used != 3 {
			t.Fatalf("other content: allowed=%v used=%d/%d, want 3/3", d.Allowed, d.Results[0].Used, d.Results[1].Used)
		}
		// Fill the minute: 15 in all, the 16th denied by recipient_minute.
		for i := 0; i < 12; i++ {
			if d := limitertest.MustDecide(t, s, limitertest.Req(t0.Add(4*time.Second), limitertest.Vals{"recipient": "bob", "content": string(rune('a' + i))}, rules...)); !d.Allowed {
				t.Fatalf("send %d denied by %s", i+4, rules[d.Denier].Name)
			}
		}
		d = limitertest.MustDecide(t, s, limitertest.Req(t0.Add(5*time.Second), limitertest.Vals{"recipient": "bob", "content": "z"}, rules...))
		if d.Allowed || rules[d.Denier].Name != "recipient_minute" || d.RetryAfter != 55*time.Second {
			t.Fatalf("16th: allowed=%v denier=%d retry=%s", d.Allowed, d.Denier, d.RetryAfter)
		}
	})
}

// Limits and windows are not part of keys: raising, lowering or turning a
// rolling rule into a calendar one keeps the history already recorded.
func TestConfigChangesKeepHistory(t *testing.T) {
	t0 := limitertest.MustParse(t, "2026-03-01T10:00:00Z")
	storeKinds(t, func(t *testing.T, newStore func(func() time.Time) limiter.Store) {
		s := newStore(nil)
		v := limitertest.Vals{"recipient": "carol"}
		r5 := &limiter.Rule{Name: "r", By: []string{"recipient"}, Limit: 5, Window: limiter.Window{Duration: time.Hour}}
		for i := 0; i < 3; i++ {
			limitertest.MustDecide(t, s, limitertest.Req(t0.Add(time.Duration(i)*time.Minute), v, r5))
		}
		lowered := &limiter.Rule{Name: "r", By: []string{"recipient"}, Limit: 3, Window: limiter.Window{Duration: time.Hour}}
		if d := limitertest.MustDecide(t, s, limitertest.Req(t0.Add(3*time.Minute), v, lowered)); d.Allowed || d.Results[0].Used != 3 {
			t.Fatalf("lowered limit: allowed=%v used=%d", d.Allowed, d.Results[0].Used)
		}
		calendar := &limiter.Rule{Name: "r", By: []string{"recipient"}, Limit: 10, Window: limiter.Window{Unit: limiter.Day}}
		if d := limitertest.MustUsage(t, s, limitertest.Req(t0.Add(4*time.Minute), v, calendar)); d.Results[0].Used != 3 {
			t.Fatalf("calendar day over the same log: used=%d, want 3", d.Results[0].Used)
		}
		shorter := &limiter.Rule{Name: "r", By: []string{"recipient"}, Limit: 3, Window: limiter.Window{Duration: 190 * time.Second}}
		if d := limitertest.MustDecide(t, s, limitertest.Req(t0.Add(4*time.Minute), v, shorter)); !d.Allowed || d.Results[0].Used != 3 {
			t.Fatalf("shorter window: allowed=%v used=%d, want admitted with 3 (two recent records and this one)", d.Allowed, d.Results[0].Used)
		}
	})
}

// A refund gives the quota back exactly once; a second refund, a made-up id
// and an empty id change nothing.
func TestRefundOnce(t *testing.T) {
	clock := &limitertest.FixedClock{T: limitertest.MustParse(t, "2026-03-01T10:00:00Z")}
	storeKinds(t, func(t *testing.T, newStore func(func() time.Time) limiter.Store) {
		s := newStore(clock.Now)
		ctx := context.Background()
		rules := limitertest.SeedRules()
		v := limitertest.Vals{"recipient": "dan", "content": "x"}
		first := limitertest.MustDecide(t, s, limitertest.Req(clock.T, v, rules...))
		second := limitertest.MustDecide(t, s, limitertest.Req(clock.T, v, rules...))
		if !first.Allowed || !second.Allowed || first.ID() == "" || first.ID() == second.ID() {
			t.Fatalf("two admissions with distinct ids expected: %q %q", first.ID(), second.ID())
		}
		for i, want := range []bool{true, false} {
			ok, err := s.Refund(ctx, first.ID())
			if err != nil || ok != want {
				t.Fatalf("refund %d: %v %v, want %v", i, ok, err, want)
			}
		}
		for _, bogus := range []string{"", "nonsense", "3:abc0:0,1,1;"} {
			if ok, err := s.Refund(ctx, bogus); ok || err != nil {
				t.Fatalf("refund %q: %v %v", bogus, ok, err)
			}
		}
		d := limitertest.MustUsage(t, s, limitertest.Req(clock.T, v, rules...))
		for i, r := range d.Results {
			if r.Used != 1 {
				t.Fatalf("rule %s used %d after one refund of two, want 1", rules[i].Name, r.Used)
			}
		}
	})
}

// A refund in a bucketed log (limit above BucketThreshold) is also once.
func TestRefundOnceBucketed(t *testing.T) {
	clock := &limitertest.FixedClock{T: limitertest.MustParse(t, "2026-03-01T10:00:00Z")}
	rule := &limiter.Rule{Name: "coupons", By: []string{"coupon"}, Limit: 233_300, Window: limiter.Window{Unit: limiter.Day}}
	storeKinds(t, func(t *testing.T, newStore func(func() time.Time) limiter.Store) {
		s := newStore(clock.Now)
		v := limitertest.Vals{"coupon": "c1"}
		var ids []string
		for i := 0; i < 3; i++ {
			ids = append(ids, limitertest.MustDecide(t, s, limitertest.Req(clock.T, v, rule)).ID())
		}
		for i, want := range []bool{true, false} {
			if ok, _ := s.Refund(context.Background(), ids[1]); ok != want {
				t.Fatalf("refund %d: %v want %v", i, ok, want)
			}
		}
		if d := limitertest.MustUsage(t, s, limitertest.Req(clock.T, v, rule)); d.Results[0].Used != 2 {
			t.Fatalf("used %d, want 2", d.Results[0].Used)
		}
	})
}

// Reset forgets a tuple's records and no other's; Usage records nothing.
func TestResetAndUsage(t *testing.T) {
	t0 := limitertest.MustParse(t, "2026-03-01T10:00:00Z")
	storeKinds(t, func(t *testing.T, newStore func(func() time.Time) limiter.Store) {
		s := newStore(nil)
		rules := limitertest.SeedRules()
		for _, who := range []string{"erin", "frank"} {
			for i := 0; i < 3; i++ {
				limitertest.MustDecide(t, s, limitertest.Req(t0, limitertest.Vals{"recipient": who, "content": "c"}, rules[:2]...))
			}
		}
		for i := 0; i < 5; i++ {
			if d := limitertest.MustUsage(t, s, limitertest.Req(t0, limitertest.Vals{"recipient": "erin"}, rules[:2]...)); d.Results[0].Used != 3 {
				t.Fatalf("usage changed the count: %d", d.Results[0].Used)
			}
		}
		if err := s.Reset(context.Background(), limitertest.Req(t0, limitertest.Vals{"recipient": "erin"}, rules[:2]...)); err != nil {
			t.Fatal(err)
		}
		if d := limitertest.MustUsage(t, s, limitertest.Req(t0, limitertest.Vals{"recipient": "erin"}, rules[:2]...)); d.Results[0].Used != 0 {
			t.Fatalf("after reset: used %d", d.Results[0].Used)
		}
		if d := limitertest.MustUsage(t, s, limitertest.Req(t0, limitertest.Vals{"recipient": "frank"}, rules[:2]...)); d.Results[0].Used != 3 {
			t.Fatalf("reset touched another recipient: used %d", d.Results[0].Used)
		}
	})
}

// A reset with Keep forgets the records made before now-Keep and keeps
// the later ones (a leased budget's blocks that other gateways may still
// spend), in every store alike; a forgotten record cannot be refunded,
// and a kept one can.
func TestResetKeepsTheLastRecords(t *testing.T) {
	t0 := limitertest.MustParse(t, "2026-03-01T10:00:00Z")
	storeKinds(t, func(t *testing.T, newStore func(func() time.Time) limiter.Store) {
		clock := &limitertest.FixedClock{T: t0.Add(3 * time.Minute)} // refunds' now
		s := newStore(clock.Now)
		rule := limitertest.SeedRules()[1] // 50 in any 24 h
		who := limitertest.Vals{"recipient": "gail"}
		var ids []string
		for i := range 4 {
			d := limitertest.MustDecide(t, s, limitertest.Req(t0.Add(time.Duration(i)*time.Minute), who, rule))
			ids = append(ids, d.ID())
		}
		at := t0.Add(3 * time.Minute)
		req := limitertest.Req(at, who, rule)
		req.Keep = 90 * time.Second
		if err := s.Reset(context.Background(), req); err != nil {
			t.Fatal(err)
		}
		if d := limitertest.MustUsage(t, s, limitertest.Req(at, who, rule)); d.Results[0].Used != 2 {
			t.Fatalf("after a reset keeping 90 s: used %d, want the 2 sends of the last 90 s", d.Results[0].Used)
		}
		if ok, _ := s.Refund(context.Background(), ids[0]); ok {
			t.Errorf("a forgotten record was refunded")
		}
		if ok, _ := s.Refund(context.Background(), ids[3]); !ok {
			t.Errorf("a kept record could not be refunded")
		}
		limitertest.MustDecide(t, s, limitertest.Req(at, who, rule))
		if d := limitertest.MustUsage(t, s, limitertest.Req(at, who, rule)); d.Results[0].Used != 2 {
			t.Fatalf("after a refund and a send: used %d, want 2", d.Results[0].Used)
		}
	})
}
