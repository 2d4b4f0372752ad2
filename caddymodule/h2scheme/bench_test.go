package h2scheme

import (
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/freqcap/caddy-freqcap/conformance"
	"github.com/freqcap/caddy-freqcap/internal/h2raw"
)

// BenchmarkGatewayCPU measures what h2_scheme costs the gateway: the CPU
// time of Caddy processes (every thread's time on a CPU, from
// /proc/<pid>/task/*/schedstat, so Caddy's own work only, never the
// client's or the mock's) per FCM-sized POST proxied over HTTP/2 with
// reverse_proxy to a mock, 16 streams at a time on one connection, for
// three clients:
//
//   - bare: a Caddy without the wrapper, an ordinary client writing
//     ":scheme: https" (the baseline);
//   - wrapped: a Caddy with the wrapper, an ordinary client (its blocks
//     are decoded and passed as sent);
//   - colon: the same Caddy, another connection writing firebase-admin's
//     "https:" (every block decoded, the ones defining it transcoded).
//
// A Caddy's CPU a request drifts by ±10 % from one process to the next
// on a shared machine, more than the effect measured, so one process
// serves all three, the wrapper on one of its two listeners only, and
// each run measures the three clients in turn, in 10 slices of b.N/10
// requests each after a warm-up. It reports each client's CPU a request
// and the ratios to bare, which -count repeats for benchstat
// (docs/performance.md gives the command).
func BenchmarkGatewayCPU(b *testing.B) {
	var seen atomic.Int64
	g := startTwoListenerGateway(b, fcm(&seen))
	pid := g.caddy.PID()
	arms := []struct {
		name   string
		client *h2raw.Client
		scheme string
		cpu    int64
	}{
		{"bare", g.dial(b), "https", 0},
		{"wrapped", g.dialWrapped(b), "https", 0},
		{"colon", g.dialWrapped(b), "https:", 0},
	}
	const streams = 16
	send := func(c *h2raw.Client, scheme string, n int) {
		ids := make([]uint32, 0, streams)
		for done := 0; done < n; done += len(ids) {
			ids = ids[:0]
			for i := 0; i < min(streams, n-done); i++ {
				id, err := c.Write(fcmHeaders(scheme, i), fcmBody, 0)
				if err != nil {
					b.Fatal(err)
				}
				ids = append(ids, id)
			}
			for id, r := range c.ReadMany(ids...) {
				if r.Status != "200" {
					b.Fatalf("stream %d: %+v", id, r)
				}
			}
		}
	}
	for _, a := range arms {
		send(a.client, a.scheme, 2000) // connections, pools and heaps, warmed
	}
	const slices = 10
	per := max(b.N/slices, 1)
	b.ResetTimer()
	for s := 0; s < slices; s++ {
		for i := range arms {
			a := &arms[(i+s)%len(arms)] // each client first in turn
			before := cpuNanos(b, pid)
			send(a.client, a.scheme, per)
			a.cpu += cpuNanos(b, pid) - before
		}
	}
	b.StopTimer()
	n := float64(per * slices)
	for _, a := range arms {
		b.ReportMetric(float64(a.cpu)/n, a.name+"-cpu-ns/req")
	}
	b.ReportMetric(float64(arms[1].cpu)/float64(arms[0].cpu), "wrapped/bare")
	b.ReportMetric(float64(arms[2].cpu)/float64(arms[0].cpu), "colon/bare")
}

// twoListenerGateway is one Caddy serving the FCM mock on two HTTPS
// listeners, the second with h2_scheme.
type twoListenerGateway struct {
	fcmGateway
	wrappedAddr string
}

func startTwoListenerGateway(b testing.TB, upstream http.Handler) *twoListenerGateway {
	pki := conformance.NewPKI(b, "127.0.0.1")
	up := conformance.Serve(b, upstream)
	bare, wrapped := conformance.FreePort(b), conformance.FreePort(b)
	site := func(port int) string {
		return fmt.Sprintf("https://:%d {\n\ttls %s %s\n\treverse_proxy %s\n}\n", port, pki.CertFile, pki.KeyFile, up)
	}
	c := conformance.StartCaddyGlobals(b, fmt.Sprintf("servers 127.0.0.1:%d {\n\tprotocols h1 h2\n\tlistener_wrappers {\n\t\th2_scheme\n\t}\n}\n", wrapped), site(bare)+site(wrapped))
	return &twoListenerGateway{
		fcmGateway:  fcmGateway{caddy: c, addr: fmt.Sprintf("127.0.0.1:%d", bare), pki: pki},
		wrappedAddr: fmt.Sprintf("127.0.0.1:%d", wrapped),
	}
}

// dialWrapped opens an HTTP/2 connection to the listener with h2_scheme.
func (g *twoListenerGateway) dialWrapped(b testing.TB) *h2raw.Client {
	w := g.fcmGateway
	w.addr = g.wrappedAddr
	return w.dial(b)
}

// cpuNanos is the time every thread of a process has run so far: the
// first field of each /proc/<pid>/task/<tid>/schedstat, in nanoseconds.
// (Go keeps its threads, so none of the process's time leaves with one.)
func cpuNanos(b *testing.B, pid int) int64 {
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		b.Skipf("reading a process's CPU time needs Linux's /proc: %v", err)
	}
	var total int64
	for _, t := range tasks {
		data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name()))
		if err != nil {
			continue // the thread ended
		}
		ns, _ := strconv.ParseInt(strings.Fields(string(data))[0], 10, 64)
		total += ns
	}
	return total
}
