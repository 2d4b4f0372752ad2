package caddymodule_test

import (
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// TestStoreDown proves that with Redis unreachable or silent, on_error
// allow passes requests and deny answers 503, both within the timeout
// (plus a margin for the test's own round trip), and that service resumes
// by itself when Redis comes back.
func TestStoreDown(t *testing.T) {
	const timeout = 150 * time.Millisecond
	const bound = timeout + 400*time.Millisecond

	// silent accepts connections and never answers.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	go func() {
		var held []net.Conn
		defer func() {
			for _, c := range held {
				c.Close()
			}
		}()
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			held = append(held, c)
		}
	}()

	for _, down := range []struct{ name, addr string }{
		{"refused", fmt.Sprintf("127.0.0.1:%d", freePort(t))},
		{"silent", silent.Addr().String()},
	} {
		t.Run(down.name, func(t *testing.T) {
			up := startUpstream(t)
			caps := func(onError string) string {
				return fmt.Sprintf(`
				redis {
					address %s
					timeout %s
				}
				key_prefix %s
				on_error %s
				dimension recipient {json.to}
				rule r {
					by     recipient
					limit  5
					window 1m
				}`, down.addr, timeout, testPrefix(), onError)
			}
			g := startGateway(t, fmt.Sprintf(`
	handle /allow {
		frequency_cap {%s
		}
		reverse_proxy %s
	}
	handle /deny {
		frequency_cap {%s
		}
		reverse_proxy %[2]s
	}`, caps("allow"), up.addr(), caps("deny")))

			for i := 0; i < 3; i++ {
				start := time.Now()
				a := g.send("/allow", map[string]any{"to": "alice"})
				took := time.Since(start)
				expectStatus(t, a, http.StatusOK)
				if took > bound {
					t.Errorf("allow took %s, want under %s", took, bound)
				}
				if a.header.Get("RateLimit") != "" {
					t.Errorf("an undecided request carries RateLimit %q", a.header.Get("RateLimit"))
				}

				start = time.Now()
				a = g.send("/deny", map[string]any{"to": "alice"})
				took = time.Since(start)
				if took > bound {
					t.Errorf("deny took %s, want under %s", took, bound)
				}
				if f := expectFailure(t, a, http.StatusServiceUnavailable, ""); f.Error != "frequency cap store unavailable" {
					t.Errorf("503 reason %q", f.Error)
				}
			}
			if up.count() != 3 {
				t.Errorf("upstream got %d, want the 3 allowed", up.count())
			}
		})
	}

	t.Run("recovers", func(t *testing.T) {
		srv := redistest.Start(t)
		up := startUpstream(t)
		g := startGateway(t, fmt.Sprintf(`
	frequency_cap {
		redis {
			address %s
			timeout %s
		}
		key_prefix %s
		dimension recipient {json.to}
		rule r {
			by     recipient
			limit  5
			window 1m
		}
	}
	reverse_proxy %s`, srv.Addr, timeout, testPrefix(), up.addr()))
		msg := map[string]any{"to": "alice"}
		if a := g.send("/", msg); a.header.Get("X-RateLimit-Remaining") != "4" {
			t.Fatalf("before the outage: remaining %q", a.header.Get("X-RateLimit-Remaining"))
		}
		srv.Stop()
		a := g.send("/", msg)
		expectStatus(t, a, http.StatusOK)
		if a.header.Get("X-RateLimit-Remaining") != "" {
			t.Errorf("during the outage a decision was reported: %v", a.header)
		}
		srv.Restart(t)
		// Redis restarted empty (no persistence): counting starts over.
		deadline := time.Now().Add(5 * time.Second)
		for {
			a = g.send("/", msg)
			if a.header.Get("X-RateLimit-Remaining") == "4" || time.Now().After(deadline) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		if a.header.Get("X-RateLimit-Remaining") != "4" {
			t.Fatalf("after Redis came back: remaining %q", a.header.Get("X-RateLimit-Remaining"))
		}
	})
}
