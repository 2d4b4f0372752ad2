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
		if h.reads(c, now) {
			if n++; !all {
				return n
			}
		}
	}
	return n
}

// reads reports whether c reads a key hot at now, and forgets the keys of
// c that have cooled down. h.mu is held.
func (h *hotKeys) reads(c *call, now time.Time) bool {
	for si := range c.p.Sections {
		key := c.p.Key(&c.p.Sections[si])
		until, ok := h.until[string(key)]
		if !ok {
			continue
		}
		if now.Before(until) {
			return true
		}
		delete(h.until, string(key))
	}
	return false
}

// split parts a batch of independent decisions into those decided in the
// script for a hot key and the rest, decided in Go. hot holds every call
// that reads a hot key and, transitively, every call that shares a key
// with one of those, so that no key is read on both paths in one batch
// (the Go path would read it before the script wrote it, and its write
// would conflict). The calls keep their order within each part. With no
// hot key it returns nil and the batch as it is, without allocating.
//
// Parting the batch, not sending it whole to the script, is what keeps a
// conflict cheap: one recipient in a burst used to send every lane batch
// that touched it (up to MaxBatch other decisions) to the script for the
// hold time, and the script costs Redis several times what the Go path
// does (docs/performance.md).
func (h *hotKeys) split(batch []*call) (hot, rest []*call) {
	h.mu.Lock()
	if len(h.until) == 0 {
		h.mu.Unlock()
		return nil, batch
	}
	now := h.now()
	var scripted map[string]bool // the keys of the hot part
	inHot := make([]bool, len(batch))
	for i, c := range batch {
		inHot[i] = h.reads(c, now)
	}
	h.mu.Unlock()
	// Close over shared keys: a key added in a pass may be read by a call
	// before it, so repeat until no key is added (a batch is at most
	// MaxBatch calls).
	for added := true; added; {
		added = false
		for i, c := range batch {
			if !inHot[i] {
				for si := range c.p.Sections {
					if scripted[string(c.p.Key(&c.p.Sections[si]))] {
						inHot[i] = true
						break
					}
				}
			}
			if !inHot[i] {
				continue
			}
			if scripted == nil {
				scripted = map[string]bool{}
			}
			for si := range c.p.Sections {
				if key := string(c.p.Key(&c.p.Sections[si])); !scripted[key] {
					scripted[key], added = true, true
				}
			}
		}
	}
	if scripted == nil {
		return nil, batch
	}
	for i, c := range batch {
		if inHot[i] {
			hot = append(hot, c)
		} else {
			rest = append(rest, c)
		}
	}
	return hot, rest
}
