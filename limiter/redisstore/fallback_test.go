package redisstore

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
	"github.com/freqcap/caddy-freqcap/limiter/memstore"
)

// With Redis killed, every decision is made locally within the timeout,
// with the limit divided; with Redis back, decisions go back to it by
// themselves, and what was admitted locally is not in it.
func TestFallback(t *testing.T) {
	// Long enough that a slow fsync (appendfsync always, on a machine busy
	// with other tests) is rarely mistaken for an outage.
	const timeout = 300 * time.Millisecond
	before := runtime.NumGoroutine()
	// Counts survive the kill, as on a production Redis with an
	// append-only file.
	aof := []string{"--appendonly", "yes", "--appendfsync", "always"}
	srv := redistest.Start(t, aof...)
	client := redis.NewClient(&redis.Options{Addr: srv.Addr, ContextTimeoutEnabled: true, DialTimeout: timeout, MaxRetries: -1})
	primary := New(client, Options{Timeout: timeout})
	local := memstore.New(memstore.Options{})
	f := limiter.NewFallback(primary, local, 3)
	rule := &limiter.Rule{Name: "minute", By: []string{"recipient"}, Limit: 10, Window: limiter.Window{Duration: time.Minute}}
	send := func() (*limiter.Decision, time.Duration) {
		t.Helper()
		start := time.Now()
		d, err := f.Decide(context.Background(), limitertest.Req(time.Time{}, limitertest.Vals{"recipient": "alice"}, rule))
		took := time.Since(start)
		if err != nil {
			t.Fatalf("decide: %v", err)
		}
		return d, took
	}

	for i := 0; i < 4; i++ {
		if d, _ := send(); !d.Allowed || d.Fallback != nil || d.Results[0].Limit != 10 {
			t.Fatalf("before the outage: allowed %v fallback %v limit %d", d.Allowed, d.Fallback, d.Results[0].Limit)
		}
	}

	srv.Stop()
	var admitted int
	var refundID string
	// A send whose command reached Redis but got no answer (a timeout, or
	// a connection closed under it: the first send as the server shuts
	// down may be run and appended to its AOF, its reply never sent) may
	// have been recorded there. Only a send Redis refused to connect for
	// certainly was not. Such sends may add to Redis's count, nothing
	// else may.
	unanswered := 0
	mayHaveRun := func(d *limiter.Decision) {
		if d.Fallback != nil && !strings.Contains(d.Fallback.Error(), "connection refused") {
			unanswered++
		}
	}
	for i := 0; i < 10; i++ {
		d, took := send()
		mayHaveRun(d)
		if d.Fallback == nil || !errors.Is(d.Fallback, limiter.ErrStore) && !errors.Is(d.Fallback, limiter.ErrTimeout) {
			t.Fatalf("during the outage: fallback %v", d.Fallback)
		}
		if took > timeout+50*time.Millisecond {
			t.Errorf("a local decision took %s, over the timeout", took)
		}
		if d.Results[0].Limit != 4 {
			t.Fatalf("local limit %d, want 10/3 rounded up", d.Results[0].Limit)
		}
		if d.Allowed {
			admitted++
			refundID = d.ID()
		}
	}
	if admitted != 4 {
		t.Errorf("admitted %d locally, want 4", admitted)
	}
	if ok, err := f.Refund(context.Background(), refundID); !ok || err != nil {
		t.Errorf("refunding a local admission: %v %v", ok, err)
	}
	if d, _ := send(); !d.Allowed || d.Fallback == nil {
		t.Errorf("after a local refund: allowed %v fallback %v", d.Allowed, d.Fallback)
	} else {
		mayHaveRun(d)
	}

	srv.Restart(t, append(aof, "--dir", srv.Dir)...)
	deadline := time.Now().Add(3 * time.Second)
	for {
		d, _ := send()
		if d.Fallback == nil {
			// Back on Redis: its 4 plus this one, nothing from the outage.
			if used := d.Results[0].Used; used < 5 || used > 5+int64(unanswered) {
				t.Errorf("back on Redis: used %d, want 5 (up to %d more from sends Redis may have run without answering)", used, unanswered)
			}
			break
		}
		mayHaveRun(d)
		if time.Now().After(deadline) {
			t.Fatal("decisions never went back to Redis")
		}
		time.Sleep(20 * time.Millisecond)
	}

	f.Close()
	client.Close()
	srv.Stop()
	waitGoroutines(t, before)
}

// waitGoroutines fails t unless the goroutines are back to n within a
// second (a closed client's reader ends a little after Close).
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(time.Second)
	for runtime.NumGoroutine() > n {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<16)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
}
