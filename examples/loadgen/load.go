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
// server answers); openloop.go sends them at a fixed rate, whatever the
// server does.

// bodySource makes push bodies: request i goes to one of the recipients
// (100k by default), with one of that recipient's contents (50 by default),
// so a cap denies rarely and A and B pass (nearly) the same requests
// upstream. A content is capped at 5 in 59 minutes: with 5 contents a
// recipient, 3 % of a 3-minute run's requests and 11 % of a 13-minute
// run's were denied, and every 429 spares B the upstream.
type bodySource struct {
	recipients int
	contents   int
	next       atomic.Uint64
}

// defaultContents is how many contents a recipient's bodies rotate through.
const defaultContents = 50

// batchSize, when above 0, makes every body an Expo batch of that many
// messages (-batch), each as a single body would be.
var batchSize int

func (b *bodySource) body() []byte {
	if batchSize == 0 {
		i := b.next.Add(1)
		h := i * 0x9E3779B97F4A7C15
		r := (h >> 16) % uint64(b.recipients)
		return fmt.Appendf(nil, `{"to":"user-%d","content":"content-%d-%d","title":"Your order has shipped","amount":1}`, r, r%97, (h>>8)%uint64(b.contents))
	}
	out := make([]byte, 0, batchSize*96)
	out = append(out, '[')
	for k := range batchSize {
		i := b.next.Add(1)
		h := i * 0x9E3779B97F4A7C15
		r := (h >> 16) % uint64(b.recipients)
		if k > 0 {
			out = append(out, ',')
		}
		out = fmt.Appendf(out, `{"to":"ExponentPushToken[user-%d]","body":"content-%d-%d","title":"Your order has shipped"}`, r, r%97, (h>>8)%uint64(b.contents))
	}
	return append(out, ']')
}

// sliceResult is what one load slice measured.
type sliceResult struct {
	lat     []time.Duration // of each request answered 2xx or 429
	denied  int             // answered 429: the cap at work, rare by design
	failed  int             // transport errors and other answers
	took    time.Duration   // from the first send to the last answer
	lateP99 time.Duration   // open loop: how late the generator sent, 99th percentile
}

// clientTimeout bounds each request of the closed loop, and how long the
// open loop waits for answers after its slice.
const clientTimeout = 30 * time.Second

// closedLoop sends for d from conc workers, each sending its next request
// as soon as the answer to its last arrives: the most the server can serve.
func closedLoop(client *http.Client, url string, bodies *bodySource, conc int, d time.Duration) sliceResult {
	var denied, failed atomic.Int64
	var mu sync.Mutex
	lat := make([]time.Duration, 0, 1<<15)
	deadline := time.Now().Add(d)
	start := time.Now()
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				sent := time.Now()
				resp, err := client.Post(url, "application/json", bytes.NewReader(bodies.body()))
				if err != nil {
					failed.Add(1)
					continue
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				el := time.Since(sent)
				switch {
				case resp.StatusCode == http.StatusTooManyRequests:
					denied.Add(1)
				case resp.StatusCode/100 != 2:
					failed.Add(1)
					continue
				}
				mu.Lock()
				lat = append(lat, el)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	return sliceResult{lat: lat, denied: int(denied.Load()), failed: int(failed.Load()), took: time.Since(start)}
}
