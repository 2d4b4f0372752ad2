package h2scheme

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
)

// BenchmarkGatewayCPU measures what h2_scheme costs the gateway: the CPU
// time of a Caddy process (user + system, from /proc, so Caddy's own
// work only, never the client's) per FCM-sized POST proxied over HTTP/2
// with reverse_proxy to a mock, 16 streams at a time on one connection:
//
//   - bare/https: no wrapper, an ordinary client (the baseline);
//   - wrapped/https: the wrapper, an ordinary client (its blocks are
//     decoded, never re-encoded);
//   - wrapped/https:: the wrapper, firebase-admin's scheme (every block
//     decoded and re-encoded).
//
// The sub-benchmarks run in turn in each round, so -count interleaves
// them; compare with benchstat (docs/performance.md gives the command).
func BenchmarkGatewayCPU(b *testing.B) {
	for _, arm := range []struct {
		name    string
		wrapped bool
		scheme  string
	}{
		{"bare/https", false, "https"},
		{"wrapped/https", true, "https"},
		{"wrapped/https:", true, "https:"},
	} {
		b.Run(arm.name, func(b *testing.B) {
			var seen atomic.Int64
			caddy, c := gateway(b, arm.wrapped, fcm(&seen))
			const streams = 16
			send := func(n int) {
				ids := make([]uint32, 0, streams)
				for i := 0; i < n; i++ {
					id, err := c.Write(fcmHeaders(arm.scheme, i), fcmBody, 0)
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
			send(streams) // the connection and the upstream's, warmed
			before := cpuTicks(b, caddy.PID())
			b.ResetTimer()
			for done := 0; done < b.N; done += streams {
				send(min(streams, b.N-done))
			}
			b.StopTimer()
			ticks := cpuTicks(b, caddy.PID()) - before
			b.ReportMetric(float64(ticks)*1e9/clockTicks/float64(b.N), "gateway-cpu-ns/op")
		})
	}
}

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat's times: 100 on
// every Linux architecture Go runs on.
const clockTicks = 100

// cpuTicks is a process's user and system time so far.
func cpuTicks(b *testing.B, pid int) int64 {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Skipf("reading a process's CPU time needs Linux's /proc: %v", err)
	}
	// The command name may hold spaces: fields count from after its ')'.
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return utime + stime
}
