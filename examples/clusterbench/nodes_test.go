package main

import "testing"

// parseUsage reads the CPU, the time executing commands and the event
// loop's cycles, and says when the server does not report its event loop
// (Redis before 7.2).
func TestParseUsage(t *testing.T) {
	info := "# CPU\r\nused_cpu_sys:1.5\r\nused_cpu_user:2.25\r\n" +
		"# Stats\r\neventloop_cycles:120\r\neventloop_duration_sum:900\r\neventloop_duration_cmd_sum:115\r\n"
	u := parseUsage(info)
	if u.cpu != 3.75 || u.inside != 115 || u.wakeups != 120 {
		t.Fatalf("got cpu %v, inside %v µs, wake-ups %v; want 3.75, 115, 120", u.cpu, u.inside, u.wakeups)
	}
	if u := parseUsage("used_cpu_sys:1\r\nused_cpu_user:1\r\n"); u.inside != -1 || u.wakeups != -1 {
		t.Fatalf("no event-loop figures: inside %v, wake-ups %v, want -1 (unknown)", u.inside, u.wakeups)
	}
	if got := addKnown(addKnown(0, 10, 4), -1, -1); got != -1 {
		t.Fatalf("a node that does not say: sum %v, want -1", got)
	}
}
