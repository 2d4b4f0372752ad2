package caddymodule_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// stallMeter notes when the test process itself did not run (descheduled
// on a busy machine, or stopped for GC): a goroutine sleeps a few ms at a
// time, and every wake-up more than stallMin late is a stall. A request
// slowed by a stall of the whole process says nothing about the handler,
// so the latency bound is applied to a request's time less the stalls
// within it.
type stallMeter struct {
	mu     sync.Mutex
	stalls [][2]time.Time
	quit   chan struct{}
	done   chan struct{}
}

const stallMin = 20 * time.Millisecond

func startStallMeter() *stallMeter {
	m := &stallMeter{quit: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		const tick = 2 * time.Millisecond
		last := time.Now()
		for {
			select {
			case <-m.quit:
				return
			case <-time.After(tick):
			}
			now := time.Now()
			if now.Sub(last) > tick+stallMin {
				m.mu.Lock()
				m.stalls = append(m.stalls, [2]time.Time{last.Add(tick), now})
				m.mu.Unlock()
			}
			last = now
		}
	}()
	return m
}

func (m *stallMeter) stop() {
	close(m.quit)
	<-m.done
}

// within returns how long the process stalled between from and to.
func (m *stallMeter) within(from, to time.Time) time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	var d time.Duration
	for _, s := range m.stalls {
		a, b := s[0], s[1]
		if a.Before(from) {
			a = from
		}
		if b.After(to) {
			b = to
		}
		if b.After(a) {
			d += b.Sub(a)
		}
	}
	return d
}

func (m *stallMeter) longest() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	var d time.Duration
	for _, s := range m.stalls {
		d = max(d, s[1].Sub(s[0]))
	}
	return d
}

// cmdStats is a command's line of INFO commandstats.
type cmdStats struct{ calls, failed int64 }

// commandStats reads a command's calls and failed calls (rejected
// before running, or failed while running) since the last CONFIG
// RESETSTAT.
func commandStats(t *testing.T, c *redis.Client, cmd string) cmdStats {
	t.Helper()
	info, err := c.Info(context.Background(), "commandstats").Result()
	if err != nil {
		t.Fatalf("INFO commandstats: %v", err)
	}
	var st cmdStats
	for _, line := range strings.Split(info, "\n") {
		fields, ok := strings.CutPrefix(strings.TrimSpace(line), "cmdstat_"+cmd+":")
		if !ok {
			continue
		}
		for _, kv := range strings.Split(fields, ",") {
			k, v, _ := strings.Cut(kv, "=")
			n, _ := strconv.ParseInt(v, 10, 64)
			switch k {
			case "calls":
				st.calls = n
			case "rejected_calls", "failed_calls":
				st.failed += n
			}
		}
	}
	return st
}
