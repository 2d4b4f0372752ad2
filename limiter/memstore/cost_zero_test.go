package memstore

import (
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// A send of cost 0 counts nothing, so it is admitted even where exempt
// sends have put the rule's count past its limit; a shadow rule says the
// same of it: it would admit it, not "would deny" (a false dry_run_deny
// before).
func TestCostZeroShadowWouldAdmit(t *testing.T) {
	t0 := limitertest.MustParse(t, "2026-03-01T10:00:00Z")
	for _, w := range []limiter.Window{{Duration: time.Minute}, {Unit: limiter.Day, Zone: time.UTC}} {
		rule := &limiter.Rule{Name: "r", By: []string{"recipient"}, Limit: 2, Window: w}
		m := New(Options{SweepInterval: -1})
		// exempt sends take it past the limit
		for i := 0; i < 4; i++ {
			r := limitertest.Req(t0.Add(time.Duration(i)*time.Millisecond), limitertest.Vals{"recipient": "a"}, rule)
			r.Exempt = true
			limitertest.MustDecide(t, m, r)
		}
		at := t0.Add(10 * time.Millisecond)
		live := limitertest.Req(at, limitertest.Vals{"recipient": "a"}, rule)
		live.Checks[0].Cost = 0
		d := limitertest.MustDecide(t, m, live)
		if !d.Allowed {
			t.Errorf("window %v: the live rule refuses a cost-0 send: %s", w, limitertest.Describe(d))
		}
		sh := limitertest.Req(at, limitertest.Vals{"recipient": "a"}, rule)
		sh.Checks[0].Cost = 0
		sh.Checks[0].Shadow = true
		d2 := limitertest.MustDecide(t, m, sh)
		ex := limitertest.Req(at, limitertest.Vals{"recipient": "a"}, rule)
		ex.Checks[0].Cost = 0
		ex.Exempt = true
		if d3 := limitertest.MustDecide(t, m, ex); d3.Results[0].Denied {
			t.Errorf("window %v: an exempt cost-0 send is said to be one the rule would deny", w)
		}
		if d2.Results[0].Denied {
			t.Errorf("window %v: live rule admits the cost-0 send, but the shadow says it would deny it", w)
		}
		m.Close()
	}
}
