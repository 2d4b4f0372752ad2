package limiter

import (
	"fmt"
	"math/rand"
	"testing"
	"time"
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
	rules := []*Rule{
		{Name: "recipient_10s", By: []string{"recipient"}, Limit: 3, Window: Window{Duration: 10 * time.Second}},
		{Name: "same_content_30s", By: []string{"recipient", "content"}, Limit: 2, Window: Window{Duration: 30 * time.Second}},
		{Name: "content_minute", By: []string{"content"}, Limit: 40, Window: Window{Duration: time.Minute}},
	}
	batched := NewMemory(MemoryOptions{SweepInterval: -1})
	defer batched.Close()
	single := NewMemory(MemoryOptions{SweepInterval: -1})
	defer single.Close()
	rng := rand.New(rand.NewSource(1))
	now := mustParse(t, "2026-03-01T10:00:00Z")
	var admitted, denied int
	for step := 0; step < 300; step++ {
		if rng.Intn(4) == 0 {
			// Past every retention and its slack: the keys expire.
			now = now.Add(time.Duration(rng.Intn(300)) * time.Second)
		}
		reqs := make([]Request, rng.Intn(80)+1)
		for i := range reqs {
			now = now.Add(time.Duration(rng.Intn(1500)) * time.Millisecond)
			who, what := fmt.Sprint("r", rng.Intn(60)), fmt.Sprint("c", rng.Intn(3))
			reqs[i] = *req(now, vals{"recipient": who, "content": what}, rules...)
		}
		ds := mustBatch(t, batched, reqs, BatchEach)
		for i := range reqs {
			d := mustDecide(t, single, &reqs[i])
			if !sameDecision(ds[i], d) || ds[i].ID() != d.ID() {
				t.Fatalf("step %d entry %d:\nbatch  %s id %q\nsingle %s id %q", step, i, describe(ds[i]), ds[i].ID(), describe(d), d.ID())
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
