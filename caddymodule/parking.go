package caddymodule

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// A memory store (the embedded store, or on_error local's) holds counts
// that nothing else has: were it closed with the last config that used
// it, a reload through a config without that cap set, or with another
// key_prefix, and back would start every recipient again from zero,
// where Redis would still hold her counts. So when its last handler is
// cleaned up it is parked instead, its sweeper still expiring keys, and a
// config that names the same store again takes it back with every count;
// a parked store is closed once its last key has expired, or when more
// than parkedMax stores are parked (the oldest first).

// parkedMax bounds the stores parked at once: each keeps its keys and its
// sweeper. A process that cycles through more store keys than this closes
// the oldest.
const parkedMax = 8

// parkCheck is how often a parked store is looked at for its last key
// (a time.Duration; the test of parking shortens it).
var parkCheck = func() *atomic.Int64 {
	var d atomic.Int64
	d.Store(int64(30 * time.Second))
	return &d
}()

// parkingOn lets memory stores outlive their configs. The package's tests
// turn it off (they load thousands of configs in one process, each
// expecting fresh counts) but for the test that proves parking. Set
// before any init function runs, so that a test's init overrides it.
var parkingOn = func() *atomic.Bool {
	var on atomic.Bool
	on.Store(true)
	return &on
}()

// parkingLot holds the parked stores by key, and their keys in the order
// they were parked.
type parkingLot struct {
	sync.Mutex
	stores map[string]*pooledStore
	order  []string
}

var parking = &parkingLot{stores: map[string]*pooledStore{}}

// unpark removes the store parked under key; the lot is locked.
func (l *parkingLot) unpark(key string) {
	delete(l.stores, key)
	l.order = slices.DeleteFunc(l.order, func(k string) bool { return k == key })
}

// lenStore is a store that counts its keys (the memory store).
type lenStore interface{ Len() int }

// park keeps p, a memory store no handler uses any more, under its key
// until its last key expires; it reports false, leaving p to be closed,
// when parking is off or p holds no key.
func park(p *pooledStore) bool {
	ls, ok := p.store.(lenStore)
	if !parkingOn.Load() || p.parkAs == "" || !ok || ls.Len() == 0 {
		return false
	}
	parking.Lock()
	if old := parking.stores[p.parkAs]; old != nil {
		// The same key parked twice cannot happen (the pool makes one
		// store a key); were it to, the newer holds the live counts.
		parking.unpark(p.parkAs)
		defer old.close()
	}
	for len(parking.order) >= parkedMax {
		oldest := parking.stores[parking.order[0]]
		parking.unpark(parking.order[0])
		defer oldest.close()
	}
	parking.stores[p.parkAs] = p
	parking.order = append(parking.order, p.parkAs)
	parking.Unlock()
	go watchParked(p, p.parkings.Add(1), ls, time.Duration(parkCheck.Load()))
	return true
}

// unpark takes back the store parked under key, or nil. A config that
// names the store again calls it before making a new one.
func unpark(key string) *pooledStore {
	parking.Lock()
	defer parking.Unlock()
	p := parking.stores[key]
	if p != nil {
		parking.unpark(key)
	}
	return p
}

// watchParked closes p once its last key has expired, looking every
// interval, unless it was taken back or closed meanwhile, or parked again
// (a parking after this one has a watcher of its own: a reload back and
// forth between two key_prefixes left one more watcher running each time).
func watchParked(p *pooledStore, parking0 int64, ls lenStore, every time.Duration) {
	tick := time.NewTicker(every)
	defer tick.Stop()
	for range tick.C {
		parking.Lock()
		if parking.stores[p.parkAs] != p || p.parkings.Load() != parking0 {
			parking.Unlock()
			return
		}
		if ls.Len() > 0 {
			parking.Unlock()
			continue
		}
		parking.unpark(p.parkAs)
		parking.Unlock()
		p.close()
		return
	}
}
