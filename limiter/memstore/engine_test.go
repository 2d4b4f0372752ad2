package memstore

import (
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"
)

// A large limit (233,300 coupons a day on one key) is kept as bucketed
// counts: the log's size depends on time, not on the number of requests.
func TestLargeLimitMemoryBounded(t *testing.T) {
	t0 := limitertest.MustParse(t, "2026-03-01T10:00:00Z")
	rule := &limiter.Rule{Name: "coupons", By: []string{"coupon"}, Limit: 233_300, Window: limiter.Window{Unit: limiter.Day, Zone: limitertest.MustZone(t, "Asia/Shanghai")}}
	m := New(Options{SweepInterval: -1})
	defer m.Close()
	for i := 0; i < 20_000; i++ {
		at := t0.Add(time.Duration(i) * 3 * time.Millisecond) // one minute of traffic
		if d := limitertest.MustDecide(t, m, limitertest.Req(at, limitertest.Vals{"coupon": "c"}, rule)); !d.Allowed {
			t.Fatalf("request %d denied", i)
		}
	}
	for i := range m.shards {
		sh := &m.shards[i]
		for si := range sh.slots.len() {
			if sh.slots.at(si).expireAt == 0 {
				continue
			}
			var k recordlog.KeyLogs
			if err := recordlog.DecodeBlob(sh.value(si), &k); err != nil {
				t.Fatal(err)
			}
			for _, l := range k.Subs {
				if len(l.Entries) > 2 {
					t.Fatalf("20,000 requests within one minute kept %d entries; want at most 2 one-minute buckets", len(l.Entries))
				}
			}
		}
	}
}
