package main

import (
	"testing"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// TestZset4CountsLikeTheStore proves that the baseline decides what the
// store decides on the benchmark's data set, so the side-by-side figures
// compare two designs doing the same work. On the simulated clock a short
// window's expiry lies in Redis's past: PEXPIREAT once deleted each such set
// as it was written, and seed 002 admitted every send. The first 1,300
// recipients of the data set hold sends the same-content rule must deny.
func TestZset4CountsLikeTheStore(t *testing.T) {
	srv := redistest.Start(t) // measure flushes its Redis: never REDIS_URL's
	const recipients = 1300
	data := makeData(recipients, 20, 5)
	admitted := map[string]int64{}
	for _, design := range []string{"zset4", "freqcap"} {
		r, err := measure(design, data, recipients, 4, "", srv.Addr, 0)
		if err != nil {
			t.Fatalf("%s: %v", design, err)
		}
		admitted[design] = r.admitted
	}
	if admitted["freqcap"] == int64(len(data)) {
		t.Fatalf("the store admitted all %d sends: the data set no longer tests a denial", len(data))
	}
	if admitted["zset4"] != admitted["freqcap"] {
		t.Fatalf("zset4 admitted %d sends, the store %d, of %d", admitted["zset4"], admitted["freqcap"], len(data))
	}
}
