package main

import (
	"fmt"
	"strings"
)

// This file is the two Caddy configurations compared: A, reverse_proxy to
// a mock upstream in the same Caddy; B, the same behind frequency_cap with
// the seed config: over {json.to}, or, with -batch, over every recipient
// of an Expo batch ({json.*.to}, batch drop).

// sendPath is where the load posts its push bodies.
const sendPath = "/v1/send"

const upstreamSite = `
:%d {
	respond "{\"status\":\"queued\"}" 200
}
`

func config(capped bool, store, redisAddr string, port, upstream, admin int) string {
	var b strings.Builder
	adminAddr := "off"
	if admin != 0 {
		adminAddr = fmt.Sprintf("127.0.0.1:%d", admin)
	}
	fmt.Fprintf(&b, "{\n\tadmin %s\n\tdefault_bind 127.0.0.1\n\tauto_https off\n}\n", adminAddr)
	fmt.Fprintf(&b, ":%d {\n", port)
	if capped {
		fmt.Fprintf(&b, "\tfrequency_cap %s* {\n\t\tname push\n", sendPath)
		recipient, content := "{json.to}", "{json.content}"
		if batchSize > 0 {
			recipient, content = "{json.*.to}", "{json.*.body}"
			fmt.Fprintf(&b, "\t\tbatch drop\n\t\tmax_batch %d\n", batchSize)
		}
		switch store {
		case "redis":
			fmt.Fprintf(&b, "\t\tredis redis://%s/0\n", redisAddr)
		case "skip":
			// A field no body has: every rule is skipped, and B reads and
			// checks the body but decides nothing.
			recipient = strings.Replace(recipient, "to}", "no_such_field}", 1)
			b.WriteString("\t\ton_missing skip\n")
		}
		fmt.Fprintf(&b, "\t\tdimension recipient %s\n\t\tdimension content %s\n", recipient, content)
		b.WriteString(`		rule recipient_minute {
			by recipient
			limit 15
			window 1m
		}
		rule recipient_day {
			by recipient
			limit 50
			window 24h
		}
		rule same_content_59s {
			by recipient content
			limit 2
			window 59s
		}
		rule same_content_59m {
			by recipient content
			limit 5
			window 59m
		}
	}
`)
	}
	// The upstream keep-alive pool is sized for the connections the load
	// has: with Caddy's default of 32 idle connections a host, the bursts
	// of admissions that a batch of decisions releases at once closed and
	// re-dialled upstream connections (thousands in TIME-WAIT a second),
	// which charged B for TCP handshakes rather than for its decisions.
	fmt.Fprintf(&b, "\treverse_proxy 127.0.0.1:%d {\n\t\ttransport http {\n\t\t\tkeepalive_idle_conns_per_host 256\n\t\t}\n\t}\n}\n", upstream)
	fmt.Fprintf(&b, upstreamSite, upstream)
	return b.String()
}
