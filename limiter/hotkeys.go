package limiter

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
func (h *hotKeys) touches(batch []*call) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.until) == 0 {
		return false
	}
	now := h.now()
	for _, c := range batch {
		for si := range c.p.sections {
			key := c.p.key(&c.p.sections[si])
			if until, ok := h.until[string(key)]; ok {
				if now.Before(until) {
					return true
				}
				delete(h.until, string(key))
			}
		}
	}
	return false
}
