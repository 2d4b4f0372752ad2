package caddymodule_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// A Caddyfile with a leased coupon budget beside a per-recipient cap works
// end to end on Redis: each send is capped per recipient (a denied one
// gives its coupon back), the budget is taken from Redis a block at a time
// (the admin API counts the block as used while it is in hand), a reload
// keeps the block, and a config without the lease gives the unspent units
// back, so that Redis counts exactly what was sent.
func TestLeasedBudgetThroughCaddy(t *testing.T) {
	srv := redistest.Start(t)
	up := startUpstream(t)
	prefix := testPrefix()
	site := func(name, leaseLine string) string {
		return fmt.Sprintf(`
	frequency_cap /send {
		name %s
		redis {
			address %s
			timeout 2s
		}
		key_prefix %s
		dimension recipient {json.to}
		dimension campaign  {json.campaign}
		rule recipient_minute {
			by     recipient
			limit  1
			window 1m
		}
		rule coupons {
			by       campaign
			limit    233300
			calendar day
			%s
		}
	}
	reverse_proxy %s`, name, srv.Addr, prefix, leaseLine, up.addr())
	}
	g := startGateway(t, site("leased", "lease 100"))
	send := func(to string) *answer {
		return g.send("/send", map[string]any{"to": to, "campaign": "spring"})
	}
	for _, to := range []string{"ann", "bob", "cid"} {
		expectStatus(t, send(to), http.StatusOK)
	}
	expectStatus(t, send("ann"), http.StatusTooManyRequests)
	if u := usageOf(t, "leased", "campaign=spring"); u["coupons"].Used != 100 {
		t.Errorf("Redis counts %d coupons with a block in hand; want the block, 100", u["coupons"].Used)
	}

	g.reloadSame()
	expectStatus(t, send("dan"), http.StatusOK)
	if u := usageOf(t, "leased", "campaign=spring"); u["coupons"].Used != 100 {
		t.Errorf("Redis counts %d coupons after a reload; want the same block, 100", u["coupons"].Used)
	}

	// Without the lease, the lease store goes and gives its block back.
	g.load(site("unleased", ""))
	if u := usageOf(t, "unleased", "campaign=spring"); u["coupons"].Used != 4 {
		t.Errorf("Redis counts %d coupons once the lease is gone; want the 4 sent", u["coupons"].Used)
	}
	expectStatus(t, send("eve"), http.StatusOK)
	if u := usageOf(t, "unleased", "campaign=spring"); u["coupons"].Used != 5 {
		t.Errorf("Redis counts %d coupons; want 5", u["coupons"].Used)
	}
}

// The admin API's records answer reads through the lease store: a leased
// budget's log is listed, its block one record.
func TestLeasedBudgetRecordsThroughCaddy(t *testing.T) {
	srv := redistest.Start(t)
	up := startUpstream(t)
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap /send {
		name leased_records
		redis {
			address %s
			timeout 2s
		}
		key_prefix %s
		on_error local
		dimension campaign {json.campaign}
		rule coupons {
			by       campaign
			limit    233300
			calendar day
			lease    100
		}
	}
	reverse_proxy %s`, srv.Addr, testPrefix(), up.addr()))
	expectStatus(t, g.send("/send", map[string]any{"campaign": "spring"}), http.StatusOK)
	a := adminDo(t, http.MethodGet, "/frequency_cap/leased_records/records?campaign=spring")
	expectStatus(t, a, http.StatusOK)
	if !strings.Contains(string(a.body), `"records":1`) {
		t.Errorf("records answer %s; want the block's one record", a.body)
	}
}
