package memstore

import (
	"fmt"
	"math/rand"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
)

// A memory batch under BatchEach decides every entry as the same requests
// decided one at a time do, admission ids included, and leaves the same
// keys behind: over recipients that repeat within a batch (a key read,
// created or changed by an earlier entry), a content key most entries
// share, keys that expired between batches (read, found stale, dropped and
// created again), keys that share a shard, and entries with times of their
// own. So the batch's transaction, which reaches its keys by index (see
// batchTxn), reads and writes what single decisions do.
func TestMemoryBatchDecidesAsOneAtATime(t *testing.T) {
	rules := []*limiter.Rule{
		{Name: "recipient_10s", By: []string{"recipient"}, Limit: 3, Window: limiter.Window{Duration: 10 * time.Second}},
		{Name: "same_content_30s", By: []string{"recipient", "content"}, Limit: 2, Window: limiter.Window{Duration: 30 * time.Second}},
		{Name: "content_minute", By: []string{"content"}, Limit: 40, Window: limiter.Window{Duration: time.Minute}},
	}
	batched := New(Options{SweepInterval: -1})
	defer batched.Close()
	single := New(Options{SweepInterval: -1})
	defer single.Close()
	rng := rand.New(rand.NewSource(1))
	now := limitertest.MustParse(t, "2026-03-01T10:00:00Z")
	var admitted, denied int
	for step := 0; step < 300; step++ {
		if rng.Intn(4) == 0 {
			// Past every retention and its slack: the keys expire.
			now = now.Add(time.Duration(rng.Intn(300)) * time.Second)
		}
		reqs := make([]limiter.Request, rng.Intn(80)+1)
		for i := range reqs {
			now = now.Add(time.Duration(rng.Intn(1500)) * time.Millisecond)
			who, what := fmt.Sprint("r", rng.Intn(60)), fmt.Sprint("c", rng.Intn(3))
			reqs[i] = *limitertest.Req(now, limitertest.Vals{"recipient": who, "content": what}, rules...)
		}
		ds := limitertest.MustBatch(t, batched, reqs, limiter.BatchEach)
		for i := range reqs {
			d := limitertest.MustDecide(t, single, &reqs[i])
			if !limitertest.SameDecision(ds[i], d) || ds[i].ID() != d.ID() {
				t.Fatalf("step %d entry %d:\nbatch  %s id %q\nsingle %s id %q", step, i, limitertest.Describe(ds[i]), ds[i].ID(), limitertest.Describe(d), d.ID())
			}
			if d.Allowed {
				admitted++
			} else {
				denied++
			}
		}
		if b, s := batched.Len(), single.Len(); b != s {
			t.Fatalf("step %d: the batch left %d keys, single decisions %d", step, b, s)
		}
	}
	if admitted == 0 || denied == 0 {
		t.Fatalf("%d admitted, %d denied: the sequence should do both", admitted, denied)
	}
}
