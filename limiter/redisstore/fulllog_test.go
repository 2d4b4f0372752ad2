package redisstore

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"
	"github.com/freqcap/caddy-freqcap/limiter/memstore"
)

// Exempt sends record past every limit, so a log can reach the most
// records a stored log holds (recordlog.MaxEntries) however low its
// limits: a campaign's budget of 5 a day taking every exempt send of the
// day. Past it the oldest records merge, in Go and in freqcap.lua alike,
// so decisions go on (they failed, leaving every cap of the log to
// on_error): the memory store, the Redis store deciding in Go and in the
// script give the same answers, the count stays exact (the merged records
// are all in the window), and a send that is not exempt is denied.
func TestFullLogStaysDecidable(t *testing.T) {
	if testing.Short() {
		t.Skip("fills a log with 65,535 records")
	}
	rules := []*limiter.Rule{
		{Name: "recipient_minute", By: []string{"recipient"}, Limit: 3, Window: limiter.Window{Duration: time.Minute}},
		{Name: "campaign_day", By: []string{"campaign"}, Limit: 5, Window: limiter.Window{Duration: 24 * time.Hour}},
	}
	clock := &limitertest.FixedClock{T: limitertest.MustParse(t, "2026-05-01T10:00:00Z")}
	req := func(who string, exempt bool) *limiter.Request {
		r := limitertest.Req(clock.T, limitertest.Vals{"recipient": who, "campaign": "spring"}, rules...)
		r.Exempt = exempt
		return r
	}
	client := redistest.Client(t)
	mem := memstore.New(memstore.Options{Now: clock.Now, SweepInterval: -1})
	defer mem.Close()
	opts := Options{Now: clock.Now, Timeout: 30 * time.Second, Prefix: "fulllog:", GoBatchMin: 1}
	red := New(client, opts)
	defer red.Close()
	opts.ScriptOnly = true
	redScript := New(client, opts)
	defer redScript.Close()
	ctx := context.Background()

	sent := 0
	for sent < recordlog.MaxEntries-20 {
		batch := make([]limiter.Request, 0, 1000)
		for i := 0; i < 1000 && sent < recordlog.MaxEntries-20; i++ {
			batch = append(batch, *req(fmt.Sprint("r", sent), true))
			sent++
		}
		for _, s := range []limiter.Store{mem, red} {
			if _, err := s.DecideBatch(ctx, batch, limiter.BatchEach); err != nil {
				t.Fatalf("filling, %d sent: %v", sent, err)
			}
		}
		clock.T = clock.T.Add(time.Second)
	}
	// Across the capacity, one send at a time: exempt sends (recorded
	// past it) and others (denied by the campaign), each decided by both
	// Redis paths in turn.
	for i := 0; i < 60; i++ {
		clock.T = clock.T.Add(time.Millisecond)
		exempt := i%3 != 2
		r := req(fmt.Sprint("late", i), exempt)
		dm, errM := mem.Decide(ctx, r)
		decider := red
		if i%2 == 1 {
			decider = redScript
		}
		dr, errR := decider.Decide(ctx, r)
		if errM != nil || errR != nil {
			t.Fatalf("send %d past %d records: memory err %v, redis err %v", i, sent, errM, errR)
		}
		if !limitertest.SameDecision(dm, dr) {
			t.Fatalf("send %d differs:\nmemory %s\nredis  %s", i, limitertest.Describe(dm), limitertest.Describe(dr))
		}
		if dm.Allowed != exempt {
			t.Fatalf("send %d (exempt %v): allowed %v", i, exempt, dm.Allowed)
		}
		if exempt {
			sent++
		}
		if used := dm.Results[1].Used; used != int64(sent) {
			t.Fatalf("send %d: the campaign counts %d, want %d", i, used, sent)
		}
	}
	if sent <= recordlog.MaxEntries {
		t.Fatalf("only %d records sent: the log never passed its capacity", sent)
	}
}
