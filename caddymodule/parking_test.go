package caddymodule

import (
	"fmt"
	"net/http"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter/memstore"
)

// The package's tests expect their configs' memory stores fresh: parking
// is on only in TestMemoryCountsOutliveTheirConfig.
func init() { parkingOn.Store(false) }

// usePark turns parking on for one test, with a short parkCheck, and
// closes what the test left parked.
func usePark(t *testing.T) {
	t.Helper()
	on, check := parkingOn.Load(), parkCheck.Load()
	parkingOn.Store(true)
	parkCheck.Store(int64(20 * time.Millisecond))
	t.Cleanup(func() {
		parkingOn.Store(on)
		parkCheck.Store(check)
		parking.Lock()
		left := parking.stores
		parking.stores, parking.order = map[string]*pooledStore{}, nil
		parking.Unlock()
		for _, p := range left {
			p.close()
		}
	})
}

// memoryCapSet is a cap set on the memory store under prefix: 3 sends a
// minute a recipient.
func memoryCapSet(t *testing.T, prefix string) *Handler {
	t.Helper()
	h, err := load(t, fmt.Sprintf(`{"name": "parked", "key_prefix": %q, "dimensions": {"r": "{json.to}"},
		"rules": [{"name": "r", "by": ["r"], "limit": 3, "window": 60000000000}]}`, prefix))
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// The memory store's counts outlive the configs that use them until they
// expire, as Redis keeps its keys: a reload through a config without the
// cap set, or with another key_prefix, and back finds every count (it
// started every recipient again from zero). A parked store is closed once
// its last key has expired, and the next config starts afresh; a store
// that holds nothing is not parked; at most parkedMax are parked, the
// oldest closed first.
func TestMemoryCountsOutliveTheirConfig(t *testing.T) {
	usePark(t)

	t.Run("a reload through other configs and back", func(t *testing.T) {
		a := memoryCapSet(t, "park-a:")
		for i := 0; i < 3; i++ {
			expectCode(t, serve(t, a, `{"to": "alice"}`).Code, http.StatusOK)
		}
		if err := a.Cleanup(); err != nil {
			t.Fatal(err)
		}
		b := memoryCapSet(t, "park-b:")
		expectCode(t, serve(t, b, `{"to": "alice"}`).Code, http.StatusOK) // its own counts
		if err := b.Cleanup(); err != nil {
			t.Fatal(err)
		}
		again := memoryCapSet(t, "park-a:")
		expectCode(t, serve(t, again, `{"to": "alice"}`).Code, http.StatusTooManyRequests)
		expectCode(t, serve(t, again, `{"to": "bob"}`).Code, http.StatusOK)
	})

	t.Run("an empty store is not parked", func(t *testing.T) {
		h := memoryCapSet(t, "park-empty:")
		if err := h.Cleanup(); err != nil {
			t.Fatal(err)
		}
		parking.Lock()
		_, parked := parking.stores["memory|park-empty:"]
		parking.Unlock()
		if parked {
			t.Error("a store holding nothing was parked")
		}
	})

	t.Run("closed once its last key expires", func(t *testing.T) {
		const key = "memory|park-exp:"
		var now atomic.Int64
		now.Store(time.Now().UnixNano())
		clock := func() time.Time { return time.Unix(0, now.Load()) }
		old := &pooledStore{store: memstore.New(memstore.Options{Now: clock, SweepInterval: time.Millisecond}), parkAs: key}
		parking.Lock()
		parking.stores[key], parking.order = old, append(parking.order, key)
		parking.Unlock()

		h := memoryCapSet(t, "park-exp:") // takes the store above back
		if h.store != old.store {
			t.Fatal("the config did not take the parked store back")
		}
		expectCode(t, serve(t, h, `{"to": "alice"}`).Code, http.StatusOK)
		if err := h.Cleanup(); err != nil {
			t.Fatal(err)
		}
		now.Add(int64(2 * time.Hour))
		deadline := time.Now().Add(5 * time.Second)
		for {
			parking.Lock()
			_, parked := parking.stores[key]
			parking.Unlock()
			if !parked {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("the store is still parked 5 s after its last key expired")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if h := memoryCapSet(t, "park-exp:"); h.store == old.store {
			t.Error("a config took back a closed store")
		}
	})

	t.Run("one watcher a parked store", func(t *testing.T) {
		// A reload back and forth between two key_prefixes parks each
		// store again and again: one watcher is left for each (a probe
		// counted 101 after 100 switches, each alive until the store's
		// last key expired).
		before := watchers()
		for i := 0; i < 20; i++ {
			for _, prefix := range []string{"park-x:", "park-y:"} {
				h := memoryCapSet(t, prefix)
				expectCode(t, serve(t, h, fmt.Sprintf(`{"to": "w%d"}`, i)).Code, http.StatusOK)
				if err := h.Cleanup(); err != nil {
					t.Fatal(err)
				}
			}
		}
		deadline := time.Now().Add(5 * time.Second)
		for n := watchers() - before; n > 2; n = watchers() - before {
			if time.Now().After(deadline) {
				t.Fatalf("%d more parked-store watchers for 2 more parked stores", n)
			}
			time.Sleep(10 * time.Millisecond)
		}
	})

	t.Run("at most parkedMax", func(t *testing.T) {
		for i := 0; i <= parkedMax; i++ {
			h := memoryCapSet(t, fmt.Sprintf("park-%d:", i))
			expectCode(t, serve(t, h, `{"to": "alice"}`).Code, http.StatusOK)
			if err := h.Cleanup(); err != nil {
				t.Fatal(err)
			}
		}
		parking.Lock()
		n := len(parking.stores)
		_, first := parking.stores["memory|park-0:"]
		_, last := parking.stores[fmt.Sprintf("memory|park-%d:", parkedMax)]
		parking.Unlock()
		if n != parkedMax || first || !last {
			t.Errorf("%d parked (want %d), the first still parked: %v, the last: %v", n, parkedMax, first, last)
		}
	})
}

func expectCode(t *testing.T, got, want int) {
	t.Helper()
	if got != want {
		t.Errorf("status %d, want %d", got, want)
	}
}

// watchers counts the goroutines running watchParked.
func watchers() int {
	buf := make([]byte, 1<<20)
	return strings.Count(string(buf[:runtime.Stack(buf, true)]), "caddymodule.watchParked(")
}
