package main

import (
	"testing"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// TestBatchDesignsDecideEverySend proves that the batch designs replay the
// whole data set: decided in Go over one and two gateways, and in the
// script, batch sends admit what single sends admit, within what replaying
// slices of the day out of order changes (see docs/performance.md), and
// the floor touches every send, paced or not.
func TestBatchDesignsDecideEverySend(t *testing.T) {
	srv := redistest.Start(t) // the designs flush their Redis: never REDIS_URL's
	const recipients = 1300
	data := makeData(recipients, 20, 5)
	single, err := measure("freqcap", data, recipients, 4, "", srv.Addr, 0)
	if err != nil {
		t.Fatal(err)
	}
	// Batches of consecutive sends decided at once record some sends
	// after later ones (a batch here spans 6 simulated minutes), and a
	// record's time is never earlier than the newest in its log, so some
	// later sends find one more record in their windows: 24-72 of 26,000
	// on a busy machine. With one sender every design admits alike, and
	// counting is exact under conflicts (limiter's
	// TestBatchSendsFromTwoGatewaysCountExactly); this test is for a
	// design that loses or doubles sends.
	slack := int64(len(data)) / 100
	for _, tc := range []struct {
		design   string
		gateways int
	}{{"freqcap-batch", 1}, {"freqcap-batch", 2}, {"freqcap-batch-commit", 1}, {"freqcap-batch-nocheck", 1}, {"freqcap-batch-script", 1}} {
		r, err := measureBatches(tc.design, data, recipients, 100, 4, tc.gateways, "", srv.Addr)
		if err != nil {
			t.Fatalf("%s over %d gateways: %v", tc.design, tc.gateways, err)
		}
		t.Logf("%s over %d gateways: admitted %d, single sends %d", tc.design, tc.gateways, r.admitted, single.admitted)
		if diff := r.admitted - single.admitted; diff > slack || diff < -slack {
			t.Errorf("%s over %d gateways admitted %d, single sends %d, of %d", tc.design, tc.gateways, r.admitted, single.admitted, len(data))
		}
	}
	floor, err := measureFloor("floor-batch", data, recipients, 100, 4, "", srv.Addr, 0)
	if err != nil || floor.admitted != int64(len(data)) {
		t.Fatalf("floor-batch touched %d of %d sends: %v", floor.admitted, len(data), err)
	}
	// Held to a pace, the floor sends no faster: its last batch starts no
	// sooner than (sends - batch) / pace after the first.
	const pace = 20_000
	paced, err := measureFloor("floor-batch-paced", data, recipients, 100, 4, "", srv.Addr, pace)
	if err != nil || paced.admitted != int64(len(data)) {
		t.Fatalf("floor-batch-paced touched %d of %d sends: %v", paced.admitted, len(data), err)
	}
	if most := pace * float64(len(data)) / float64(len(data)-100); paced.rate > most {
		t.Errorf("floor-batch-paced at %.0f sends a second, held to %d", paced.rate, pace)
	}
}
