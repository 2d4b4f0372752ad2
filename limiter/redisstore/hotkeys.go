package redisstore

import (
	"sync"
	"time"
)

// hotKeys remembers the keys whose writes from Go recently found them
// changed since the read. A batch that touches one is decided in the script
// for a while instead: a key that every request shares (a per-campaign
// budget, or a recipient in a burst) would otherwise make most batches pay
// for a read, a failed write and the script.
type hotKeys struct {
	mu    sync.Mutex
	until map[string]time.Time
	now   func() time.Time
	hold  time.Duration
}

func newHotKeys(now func() time.Time, hold time.Duration) *hotKeys {
	return &hotKeys{until: map[string]time.Time{}, now: now, hold: hold}
}

// maxHot bounds the keys remembered: a key is forgotten when a batch
// touches it cooled down, or by mark past this many.
const maxHot = 1024

// mark makes key hot for the hold time.
func (h *hotKeys) mark(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := h.now()
	if len(h.until) >= maxHot {
		for k, until := range h.until {
			if !now.Before(until) {
				delete(h.until, k)
			}
		}
		if len(h.until) >= maxHot {
			clear(h.until) // it is only a hint
		}
	}
	h.until[key] = now.Add(h.hold)
}

// touches reports whether a call of the batch reads a hot key, and forgets
// the keys that have cooled down.
func (h *hotKeys) touches(batch []*call) bool { return h.touching(batch, false) > 0 }

// touching counts the calls of the batch that read a hot key (with all
// false it stops at the first), and forgets the keys that have cooled
// down.
func (h *hotKeys) touching(batch []*call, all bool) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.until) == 0 {
		return 0
	}
	now := h.now()
	n := 0
	for _, c := range batch {
		for si := range c.p.Sections {
			key := c.p.Key(&c.p.Sections[si])
			until, ok := h.until[string(key)]
			if !ok {
				continue
			}
			if !now.Before(until) {
				delete(h.until, string(key))
				continue
			}
			if n++; !all {
				return n
			}
			break
		}
	}
	return n
}
