package main

import (
	"testing"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// TestPrimitivesRun proves every primitive of -primitives runs against a
// real Redis, the compare-and-sets included (commit.lua answers that every
// key was written, as nothing else wrote them).
func TestPrimitivesRun(t *testing.T) {
	srv := redistest.Start(t) // the measurement flushes its Redis: never REDIS_URL's
	if err := measurePrimitives("", srv.Addr, 1_000, 300, 1); err != nil {
		t.Fatal(err)
	}
}
