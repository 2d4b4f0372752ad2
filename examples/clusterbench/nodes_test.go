package main

import "testing"

// parseUsage counts the time inside the store's commands only, not the
// bench's own (INFO, FLUSHALL, CLUSTER …), and says when the server does
// not report its event loop (Redis before 7.2).
func TestParseUsageLeavesOutTheBenchsCommands(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:1.5\r\nused_cpu_user:2.25\r\n" +
		"# Stats\r\neventloop_cycles:120\r\n" +
		"# Commandstats\r\n" +
		"cmdstat_get:calls=10,usec=15,usec_per_call=1.50,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_evalsha:calls=2,usec=100,usec_per_call=50.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_info:calls=4,usec=80,usec_per_call=20.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_cluster|info:calls=3,usec=90,usec_per_call=30.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_flushall:calls=1,usec=200,usec_per_call=200.00,rejected_calls=0,failed_calls=0\r\n"
	u := parseUsage(info)
	if u.cpu != 3.75 || u.inside != 115 || u.wakeups != 120 {
		t.Fatalf("got cpu %v, inside %v µs, wake-ups %v; want 3.75, 115, 120", u.cpu, u.inside, u.wakeups)
	}
	if u := parseUsage("used_cpu_sys:1\r\nused_cpu_user:1\r\n"); u.wakeups != -1 {
		t.Fatalf("no eventloop_cycles: wake-ups %v, want -1 (unknown)", u.wakeups)
	}
}
