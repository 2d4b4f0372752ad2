package main

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"
)

// This file is the load: push bodies, sent closed loop (as fast as the
// server answers) or open loop (at a fixed rate, whatever the server does).

// bodySource makes push bodies: request i goes to one of 100k recipients,
// with one of five contents of that recipient, so a cap denies rarely and
// A and B pass (nearly) the same requests upstream.
type bodySource struct {
	recipients int
	next       atomic.Uint64
}

func (b *bodySource) body() []byte {
	i := b.next.Add(1)
	h := i * 0x9E3779B97F4A7C15
	r := (h >> 16) % uint64(b.recipients)
	return fmt.Appendf(nil, `{"to":"user-%d","content":"content-%d-%d","title":"Your order has shipped","amount":1}`, r, r%97, (h>>8)%5)
}

// sliceResult is what one load slice measured.
type sliceResult struct {
	lat    []time.Duration // of each request answered 2xx or 429
	denied int             // answered 429: the cap at work, rare by design
	failed int             // transport errors and other answers
	took   time.Duration   // from the first send to the last answer
}

// load sends for d: closed loop with conc workers when rate is 0, else
// open loop at rate requests a second. An open-loop request's latency runs
// from when it was due, so a stall of the generator itself counts against
// the server rather than vanishing (no coordinated omission).
func load(client *http.Client, url string, bodies *bodySource, conc int, d time.Duration, rate float64) sliceResult {
	var denied, failed atomic.Int64
	var mu sync.Mutex
	lat := make([]time.Duration, 0, 1<<15)
	deadline := time.Now().Add(d)
	one := func(due time.Time) {
		body := bodies.body()
		resp, err := client.Post(url, "application/json", bytes.NewReader(body))
		if err != nil {
			failed.Add(1)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		el := time.Since(due)
		switch {
		case resp.StatusCode == http.StatusTooManyRequests:
			denied.Add(1)
		case resp.StatusCode/100 != 2:
			failed.Add(1)
			return
		}
		mu.Lock()
		lat = append(lat, el)
		mu.Unlock()
	}
	start := time.Now()
	var wg sync.WaitGroup
	if rate == 0 {
		for range conc {
			wg.Go(func() {
				for time.Now().Before(deadline) {
					one(time.Now())
				}
			})
		}
	} else {
		interval := time.Duration(float64(time.Second) / rate)
		for t := time.Now(); t.Before(deadline); t = t.Add(interval) {
			time.Sleep(time.Until(t))
			wg.Go(func() { one(t) })
		}
	}
	wg.Wait()
	return sliceResult{lat: lat, denied: int(denied.Load()), failed: int(failed.Load()), took: time.Since(start)}
}
