package main

import (
	"net/http"
	"runtime"
	"sort"
	"sync"
	"syscall"
	"time"
)

// openLoop sends to addr+path at rate requests a second for d, whatever the
// server does, over up to conns keep-alive connections, and times each
// request from when it was due: a stall of the server or of the generator
// counts against the server rather than vanishing (no coordinated
// omission).
//
// The requests leave on time. Go's timers wake an idle process through
// epoll_wait, whose timeout is in whole milliseconds: paced with
// time.Sleep, requests left 0.3–0.6 ms late at the median and 1 ms at the
// 90th percentile, and that lateness was part of every latency measured,
// larger than the effects the latency phase looks for. So one goroutine,
// locked to its thread with the kernel's timer slack cut to 1 ns, sleeps
// in nanosleep until each request is due and writes it there and then;
// each connection's reader goroutine reads the answer. Measured against
// the same Caddy at 1,000 and 4,000 requests/s: sent 22–29 µs late at the
// median and 45–90 µs at the 99th percentile, where time.Sleep gave 0.3–0.6
// ms and 1.1–1.9 ms. Each slice's log line gives its 99th percentile.
func openLoop(addr, path string, bodies *bodySource, conns int, d time.Duration, rate float64) sliceResult {
	// The pacing thread keeps its P through a short nanosleep (the
	// runtime takes it back only after 20 µs to 10 ms), so the readers
	// need another, even on one core.
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(max(2, runtime.GOMAXPROCS(0))))

	// Every dial, read and write ends by then, so that no reader waits on
	// a silent server for ever.
	connDeadline := time.Now().Add(dialTime + d + clientTimeout)
	type reader struct {
		rc  *rawConn
		due chan time.Time
	}
	idle := make(chan *reader, conns)
	var (
		mu   sync.Mutex
		res  sliceResult
		wg   sync.WaitGroup
		late []time.Duration
	)
	record := func(lat []time.Duration, denied, failed int) {
		mu.Lock()
		res.lat = append(res.lat, lat...)
		res.denied += denied
		res.failed += failed
		mu.Unlock()
	}
	readers := make([]*reader, conns)
	for i := range readers {
		rd := &reader{
			rc:  &rawConn{addr: addr, path: path, deadline: connDeadline},
			due: make(chan time.Time, 1),
		}
		readers[i] = rd
		// Connected and used once before the slice, as net/http's pool
		// is: a slice's first requests do not pay for a dial, nor for
		// the server's first request on a connection.
		if err := rd.rc.send(bodies.body()); err == nil {
			rd.rc.receive()
		}
		idle <- rd
		wg.Go(func() {
			defer rd.rc.drop()
			var lat []time.Duration
			denied, failed := 0, 0
			for due := range rd.due {
				status, err := rd.rc.receive()
				el := time.Since(due)
				idle <- rd // the answer is read: the connection is free
				switch {
				case err != nil || (status/100 != 2 && status != http.StatusTooManyRequests):
					failed++
					continue
				case status == http.StatusTooManyRequests:
					denied++
				}
				lat = append(lat, el)
			}
			record(lat, denied, failed)
		})
	}

	start := time.Now()
	deadline := start.Add(d)
	paced := make(chan struct{})
	go func() {
		defer close(paced)
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		setTimerSlack(1)
		defer setTimerSlack(0) // back to the thread's default
		interval := time.Duration(float64(time.Second) / rate)
		failed := 0
		for t := start; t.Before(deadline); t = t.Add(interval) {
			sleepUntil(t)
			rd := <-idle // none idle: this one waits, and its wait counts
			late = append(late, time.Since(t))
			if err := rd.rc.send(bodies.body()); err != nil {
				failed++
				idle <- rd
				continue
			}
			rd.due <- t
		}
		record(nil, 0, failed)
	}()
	<-paced
	for _, rd := range readers {
		close(rd.due)
	}
	wg.Wait()
	res.took = time.Since(start)
	res.lateP99 = quantile(late, 0.99)
	return res
}

// sleepUntil puts the calling thread to sleep until t in the kernel.
func sleepUntil(t time.Time) {
	for {
		d := time.Until(t)
		if d <= 0 {
			return
		}
		ts := syscall.NsecToTimespec(int64(d))
		syscall.Nanosleep(&ts, nil) // EINTR: the loop sleeps the rest
	}
}

// setTimerSlack sets how late the kernel may wake the calling thread, in
// ns (0: the default, 50 µs).
func setTimerSlack(ns uintptr) {
	const prSetTimerslack = 29
	syscall.RawSyscall(syscall.SYS_PRCTL, prSetTimerslack, ns, 0)
}

// dialTime is what openLoop allows for connecting and warming its
// connections before the slice starts.
const dialTime = 5 * time.Second

// quantile is the q-quantile of d; it sorts d.
func quantile(d []time.Duration, q float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[min(len(d)-1, int(float64(len(d))*q))]
}
