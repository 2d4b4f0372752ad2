package redisstore

import (
	"fmt"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// Policy on every store: a per-check limit, a shadow check, an exempt
// request. Each step is one request at t0+i s.
func TestPolicy(t *testing.T) {
	t0 := limitertest.MustParse(t, "2026-03-01T10:00:00Z")
	minute := &limiter.Rule{Name: "minute", By: []string{"recipient"}, Limit: 2, Window: limiter.Window{Duration: time.Minute}}
	day := &limiter.Rule{Name: "day", By: []string{"recipient"}, Limit: 1000, Window: limiter.Window{Unit: limiter.Day}}
	content := &limiter.Rule{Name: "content", By: []string{"recipient", "content"}, Limit: 1, Window: limiter.Window{Duration: time.Hour}}
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }

	t.Run("limit per check", func(t *testing.T) {
		storeKinds(t, func(t *testing.T, newStore func(func() time.Time) limiter.Store) {
			s := newStore(nil)
			// Tier 3 for alice: a third request passes where the rule's 1000
			// a day would, and the fourth is denied by the day rule held to 3.
			for i, want := range []bool{true, true, true, false} {
				r := limitertest.Req(at(i*30), limitertest.Vals{"recipient": "alice"}, day)
				r.Checks[0].Limit = 3
				d := limitertest.MustDecide(t, s, r)
				if d.Allowed != want || d.Results[0].Limit != 3 {
					t.Fatalf("request %d: allowed %v limit %d, want %v 3", i, d.Allowed, d.Results[0].Limit, want)
				}
				if !want && (d.Denier != 0 || d.Results[0].Remaining != 0 || d.RetryAfter <= 0) {
					t.Fatalf("request %d: denier %d remaining %d retry %s", i, d.Denier, d.Results[0].Remaining, d.RetryAfter)
				}
			}
			// Moving to a higher tier keeps the 3 already counted.
			r := limitertest.Req(at(200), limitertest.Vals{"recipient": "alice"}, day)
			r.Checks[0].Limit = 5
			if d := limitertest.MustDecide(t, s, r); !d.Allowed || d.Results[0].Used != 4 || d.Results[0].Remaining != 1 {
				t.Fatalf("after the tier change: allowed %v used %d remaining %d, want true 4 1", d.Allowed, d.Results[0].Used, d.Results[0].Remaining)
			}
			// A limit above the rule's is held to the rule's.
			r = limitertest.Req(at(201), limitertest.Vals{"recipient": "bob"}, minute)
			r.Checks[0].Limit = 50
			if d := limitertest.MustDecide(t, s, r); d.Results[0].Limit != 2 {
				t.Fatalf("limit %d, want the rule's 2", d.Results[0].Limit)
			}
		})
	})

	t.Run("shadow", func(t *testing.T) {
		storeKinds(t, func(t *testing.T, newStore func(func() time.Time) limiter.Store) {
			s := newStore(nil)
			send := func(i int, c string) *limiter.Decision {
				r := limitertest.Req(at(i), limitertest.Vals{"recipient": "alice", "content": c}, minute, content)
				r.Checks[1].Shadow = true
				return limitertest.MustDecide(t, s, r)
			}
			// The shadow rule would deny the second "hi": it passes, counted.
			send(0, "hi")
			d := send(1, "hi")
			sh := d.Results[1]
			if !d.Allowed || d.Denier != -1 || !sh.Denied || !sh.Waived || sh.Used != 2 || sh.Remaining != 0 || sh.RetryAfter != 0 {
				t.Fatalf("shadow denial: allowed %v denier %d, shadow %+v", d.Allowed, d.Denier, sh)
			}
			if d.Results[0].Denied || d.Results[0].Waived || d.Results[0].Used != 2 {
				t.Fatalf("live rule: %+v", d.Results[0])
			}
			// The live rule denies the third: nothing recorded, the shadow
			// rule included.
			d = send(2, "hi")
			if d.Allowed || d.Denier != 0 || d.Recorded() {
				t.Fatalf("live denial: allowed %v denier %d recorded %v", d.Allowed, d.Denier, d.Recorded())
			}
			if d.Results[1].Used != 2 {
				t.Fatalf("shadow counted %d after a live denial, want 2", d.Results[1].Used)
			}
			u := limitertest.MustUsage(t, s, limitertest.Req(at(3), limitertest.Vals{"recipient": "alice", "content": "hi"}, content))
			if u.Results[0].Used != 2 {
				t.Fatalf("shadow log holds %d, want 2", u.Results[0].Used)
			}
		})
	})

	t.Run("exempt", func(t *testing.T) {
		storeKinds(t, func(t *testing.T, newStore func(func() time.Time) limiter.Store) {
			s := newStore(nil)
			for i := 0; i < 2; i++ {
				limitertest.MustDecide(t, s, limitertest.Req(at(i), limitertest.Vals{"recipient": "alice", "content": "x"}, minute))
			}
			// Past a full rule: admitted, recorded in every rule.
			r := limitertest.Req(at(2), limitertest.Vals{"recipient": "alice", "content": "otp"}, minute, content)
			r.Exempt = true
			d := limitertest.MustDecide(t, s, r)
			if !d.Allowed || !d.Recorded() || d.Denier != -1 {
				t.Fatalf("exempt: allowed %v recorded %v denier %d", d.Allowed, d.Recorded(), d.Denier)
			}
			m := d.Results[0]
			if !m.Denied || !m.Waived || m.Used != 3 || m.Remaining != 0 || m.Limit != 2 {
				t.Fatalf("exempt over a full rule: %+v", m)
			}
			if c := d.Results[1]; c.Denied || !c.Waived || c.Used != 1 {
				t.Fatalf("exempt under a rule: %+v", c)
			}
			// The next normal request sees it counted.
			d = limitertest.MustDecide(t, s, limitertest.Req(at(3), limitertest.Vals{"recipient": "alice", "content": "otp"}, content))
			if d.Allowed || d.Results[0].Used != 1 {
				t.Fatalf("after the exempt request: allowed %v used %d", d.Allowed, d.Results[0].Used)
			}
		})
	})
}

// A per-check limit under a rule whose own limit only bounds it (the
// Caddyfile's limit {placeholder} gives the rule 2^40, so its log is kept in
// buckets) holds on every Redis path: the script alone, Go decisions of one
// request, and batches under load that mix requests held to 3 and to 5 for
// the same recipients (their specs differ only in the limit).
func TestRedisPerCheckLimitOnEveryPath(t *testing.T) {
	day := &limiter.Rule{Name: "day", By: []string{"recipient"}, Limit: 1 << 40, Window: limiter.Window{Duration: 24 * time.Hour}}
	for _, tc := range []struct {
		name string
		opts Options
	}{
		{"script", Options{ScriptOnly: true}},
		{"go", Options{GoBatchMin: 1}},
		{"default", Options{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.opts.Timeout = 5 * time.Second
			s := New(redistest.Client(t), tc.opts)
			for i := 0; i < 5; i++ {
				r := limitertest.Req(time.Time{}, limitertest.Vals{"recipient": "gold"}, day)
				r.Checks[0].Limit = 3
				if d := limitertest.MustDecide(t, s, r); d.Allowed != (i < 3) || d.Results[0].Limit != 3 {
					t.Fatalf("send %d: allowed %v used %d limit %d", i, d.Allowed, d.Results[0].Used, d.Results[0].Limit)
				}
			}
			// Each of 4 recipients gets requests held to 3 and to 5: the
			// ones held to 5 fill it, so exactly 5 each.
			mk := func(g, i int) *limiter.Request {
				r := limitertest.Req(time.Time{}, limitertest.Vals{"recipient": fmt.Sprint("r", i%4)}, day)
				r.Checks[0].Limit = int64(3 + g%2*2)
				return r
			}
			if got := hammer(t, []limiter.Store{s}, 32, 16, mk); got != 20 {
				t.Fatalf("admitted %d, want 4 × 5", got)
			}
		})
	}
}
