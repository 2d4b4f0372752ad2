package main

import (
	"testing"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// TestRequestDesignsBuildEverySend proves that requests and requests-batch
// go through every send, deciding none against the server, and that every
// design measures the process's CPU.
func TestRequestDesignsBuildEverySend(t *testing.T) {
	srv := redistest.Start(t)
	const recipients = 500
	data := makeData(recipients, 20, 5)
	single, err := measure("requests", data, recipients, 4, "", srv.Addr, 0)
	if err != nil {
		t.Fatal(err)
	}
	batch, err := measureBatches("requests-batch", data, recipients, 100, 4, 1, "", srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range map[string]result{"requests": single, "requests-batch": batch} {
		if r.admitted != int64(len(data)) {
			t.Errorf("%s went through %d of %d sends", name, r.admitted, len(data))
		}
		if r.clientMicros <= 0 {
			t.Errorf("%s measured %.2f µs of client CPU a decision", name, r.clientMicros)
		}
	}
}
