package caddymodule_test

import (
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// TestPolicyLocalFallback kills Redis under load behind three gateways
// (three handlers in one Caddy, each with its own local store, sharing one
// Redis) with on_error local 3, and proves that every decision is made
// locally within the timeout, that each gateway admits at most its share
// (10/3 rounded up: 4), so a recipient gets at most 12 during the outage;
// that the metrics say store="local"; that decisions go back to Redis by
// themselves when it is back, with nothing admitted locally copied there;
// that the admin API answers 503 about a recipient meanwhile rather than
// what the local store holds; and that no goroutine is left behind.
func TestPolicyLocalFallback(t *testing.T) {
	// Redis writes with appendfsync always, so the counts before the
	// outage survive the kill; a slow fsync on a busy machine must not
	// pass for an outage before it, hence a timeout above faultTimeout.
	const timeout = 3 * faultTimeout
	aof := []string{"--appendonly", "yes", "--appendfsync", "always"}
	srv := redistest.Start(t, aof...)
	up := startUpstream(t)
	prefix := testPrefix()
	var site strings.Builder
	for i := 1; i <= 3; i++ {
		fmt.Fprintf(&site, `
	frequency_cap /gw%[1]d {
		name gw%[1]d
		redis {
			address %[2]s
			timeout %[3]s
		}
		key_prefix %[4]s
		on_error local 3
		dimension recipient {json.to}
		rule hour {
			by recipient
			limit 10
			window 1h
		}
	}`, i, srv.Addr, timeout, prefix)
	}
	g := startGateway(t, site.String()+"\n\treverse_proxy "+up.addr())
	send := func(gw int, to string) (*answer, time.Duration) {
		start := time.Now()
		a := g.send(fmt.Sprintf("/gw%d", gw), map[string]any{"to": to})
		return a, time.Since(start)
	}
	for i := 0; i < 2; i++ {
		expectStatus(t, g.send("/gw1", map[string]any{"to": "erin"}), http.StatusOK)
	}
	before, _ := scrape(t)
	goroutines := runtime.NumGoroutine()

	// Load on other recipients while Redis dies, so the kill lands on
	// decisions in flight.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				a, took := send(1+i%3, fmt.Sprintf("load%d-%d", w, i%50))
				if took > timeout+faultMargin {
					t.Errorf("a request under load took %s", took)
				}
				if a.status != http.StatusOK && a.status != http.StatusTooManyRequests {
					t.Errorf("a request under load got %d: %s", a.status, a.body)
				}
			}
		}()
	}
	time.Sleep(200 * time.Millisecond)
	srv.Stop()
	time.Sleep(200 * time.Millisecond)

	admitted := map[int]int{}
	for i := 0; i < 30; i++ {
		gw := 1 + i%3
		a, took := send(gw, "erin")
		if took > timeout+faultMargin {
			t.Errorf("gw%d decided in %s, over the timeout", gw, took)
		}
		switch a.status {
		case http.StatusOK:
			admitted[gw]++
		case http.StatusTooManyRequests:
			if p := a.header.Get("RateLimit-Policy"); p != `"hour";q=4;w=3600` {
				t.Errorf("local denial RateLimit-Policy %q", p)
			}
		default:
			t.Fatalf("gw%d answered %d during the outage: %s", gw, a.status, a.body)
		}
	}
	total := 0
	for gw := 1; gw <= 3; gw++ {
		if admitted[gw] != 4 {
			t.Errorf("gw%d admitted %d during the outage, want its share 4", gw, admitted[gw])
		}
		total += admitted[gw]
	}
	if total > 12 {
		t.Errorf("a recipient got %d during the outage, over 3 × 4", total)
	}
	// Support asks about erin meanwhile: the local store holds only this
	// gateway's outage sends, not the 2 Redis holds, so the answer is
	// that the store failed, not a usage (nor "nothing held").
	for _, path := range []string{"/frequency_cap/gw1/usage?recipient=erin", "/frequency_cap/gw1/records?recipient=erin"} {
		a := adminDo(t, http.MethodGet, path)
		if a.status != http.StatusServiceUnavailable || !strings.Contains(string(a.body), "local fallback holds only what it admitted") {
			t.Errorf("GET %s during the outage: %d %s, want 503 naming the fallback", path, a.status, a.body)
		}
	}
	close(stop)
	wg.Wait()
	mid, _ := scrape(t)
	for gw := 1; gw <= 3; gw++ {
		name := fmt.Sprintf("gw%d", gw)
		local := series("caddy_frequency_cap_decisions_by_store_total", "handler", name, "store", "local")
		if mid[local]-before[local] < 10 {
			t.Errorf("%s counted %v local decisions, want at least 10", local, mid[local]-before[local])
		}
	}

	srv.Restart(t, append(aof, "--dir", srv.Dir)...)
	deadline := time.Now().Add(faultRecovery)
	for {
		b, _ := scrape(t)
		redisSeries := series("caddy_frequency_cap_decisions_by_store_total", "handler", "gw2", "store", "redis")
		a, _ := send(2, "frank")
		a2, _ := scrape(t)
		if a2[redisSeries] > b[redisSeries] {
			expectStatus(t, a, http.StatusOK)
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("decisions never went back to Redis")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Redis holds erin's 2 from before the outage, none of the 12.
	if u := usageOf(t, "gw1", "recipient=erin"); u["hour"].Used != 2 {
		t.Errorf("Redis counts %d for erin, want the 2 from before the outage", u["hour"].Used)
	}

	// The goroutines come back down to where they were before the kill.
	deadline = time.Now().Add(5 * time.Second)
	for {
		client.CloseIdleConnections()
		up.CloseClientConnections()
		n := runtime.NumGoroutine()
		if n <= goroutines+goroutineSlack {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("%d goroutines after the outage, %d before", n, goroutines)
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
}
