package caddymodule_test

import (
	"bytes"
	"fmt"
	"testing"
	"time"
)

// A Caddy whose Redis cannot be reached says so at start, before any
// request: the new user's case of issue 27, an SMS gateway with on_error
// local 3 whose REDIS_URL pointed nowhere, which used to run quietly on a
// third of every limit with one warning at the first request. The log
// names the store, its address, on_error and the divisor, then warns that
// the store is unreachable.
func TestUnreachableStoreLoudAtStart(t *testing.T) {
	port := freePort(t) // nothing listens there
	p := startCaddyProcess(t, caddyBinary(t), fmt.Sprintf(`
	frequency_cap /v1/sms* {
		name sms
		redis redis://127.0.0.1:%d/0
		on_error local 3
		dimension recipient {json.to}
		rule recipient_day {
			by     recipient
			limit  5
			window 24h
		}
	}
	respond "sent"`, port))
	deadline := time.Now().Add(10 * time.Second)
	for {
		log := p.log()
		store := bytes.Contains(log, []byte(`"msg":"frequency cap store"`)) || bytes.Contains(log, []byte("frequency cap store\t"))
		warned := bytes.Contains(log, []byte("frequency cap store unreachable at start"))
		if store && warned {
			for _, want := range []string{fmt.Sprintf("127.0.0.1:%d", port), `"on_error":"local"`, `"local_divisor":3`} {
				if !bytes.Contains(log, []byte(want)) {
					t.Errorf("the start log does not say %s:\n%s", want, tail(log, 4000))
				}
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("no start log naming the store and warning that it is unreachable (store line %v, warning %v):\n%s", store, warned, tail(log, 4000))
		}
		time.Sleep(50 * time.Millisecond)
	}
}
