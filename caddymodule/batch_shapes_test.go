package caddymodule_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
)

// TestBatchGorush proves the gorush shape with a content dimension per
// notification ({json.notifications.*.message} for every token of that
// notification): the same message to token t1 in two notifications of
// one batch is capped on the second (same_message, 1 a minute), and under
// drop that notification, whose only token it was, disappears while the
// other notification is passed on whole.
func TestBatchGorush(t *testing.T) {
	up := startUpstream(t)
	name := batchName()
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap /api/push* {
		name %s
		key_prefix %s
		batch drop
		dimension token   {json.notifications.*.tokens.*}
		dimension message {json.notifications.*.message}
		rule token_minute {
			by     token
			limit  10
			window 1m
		}
		rule same_message {
			by     token message
			limit  1
			window 1m
		}
	}
	reverse_proxy %s`, name, testPrefix(), up.addr()))
	body := `{"notifications":[{"tokens":["t1","t2"],"platform":2,"message":"hi"},{"tokens":["t1"],"platform":2,"message":"hi"},{"tokens":["t1"],"platform":2,"message":"other"}]}`
	a := g.post("/api/push", "application/json", body)
	expectStatus(t, a, http.StatusOK)
	if d := dropped(t, a); !slices.Equal(d, []string{"notifications.1.tokens.0"}) {
		t.Errorf("dropped %v", d)
	}
	want := `{"notifications":[{"tokens":["t1","t2"],"platform":2,"message":"hi"},{"tokens":["t1"],"platform":2,"message":"other"}]}`
	if got := string(up.last().body); got != want {
		t.Errorf("upstream got\n%s\nwant\n%s", got, want)
	}
	expectUsage(t, usageOf(t, name, "token=t1&message=hi"), map[string][2]int64{"token_minute": {2, 8}, "same_message": {1, 0}})
}

// TestBatchSendGridReject proves the SendGrid shape
// ({json.personalizations.*.to.*.email}) under batch reject with a
// dimension the same for every entry (a header) and log_values: one
// capped recipient refuses the whole request, the denial names its path
// and value, nothing reaches the upstream and nothing is recorded for the
// other recipients.
func TestBatchSendGridReject(t *testing.T) {
	up := startUpstream(t)
	name := batchName()
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap /v3/mail/send {
		name %s
		key_prefix %s
		log_values
		dimension email {json.personalizations.*.to.*.email}
		dimension app   {header.X-App}
		rule per_app {
			by     email app
			limit  1
			window 1h
		}
	}
	reverse_proxy %s`, name, testPrefix(), up.addr()))
	mail := func(emails ...[]string) string {
		var ps []map[string]any
		for _, to := range emails {
			var tos []map[string]string
			for _, e := range to {
				tos = append(tos, map[string]string{"email": e, "name": "N"})
			}
			ps = append(ps, map[string]any{"to": tos})
		}
		b, _ := json.Marshal(map[string]any{"personalizations": ps, "from": map[string]string{"email": "shop@example.com"}, "subject": "s"})
		return string(b)
	}
	expectStatus(t, g.post("/v3/mail/send", "application/json", mail([]string{"c@example.com"}), "X-App: shop"), http.StatusOK)

	a := g.post("/v3/mail/send", "application/json", mail([]string{"a@example.com", "b@example.com"}, []string{"c@example.com"}), "X-App: shop")
	expectStatus(t, a, http.StatusTooManyRequests)
	p := a.batchDenial(t)
	if len(p.Denied) != 1 || p.Denied[0] != (deniedEntry{Path: "personalizations.1.to.0.email", Value: "c@example.com", Rule: "per_app", RetryAfter: p.RetryAfter}) {
		t.Errorf("denied %+v", p.Denied)
	}
	if up.count() != 1 {
		t.Errorf("upstream got %d requests, want 1", up.count())
	}
	expectUsage(t, usageOf(t, name, "email=a@example.com&app=shop"), map[string][2]int64{"per_app": {0, 1}})
	// Another app is another count: the header is the same for every entry.
	expectStatus(t, g.post("/v3/mail/send", "application/json", mail([]string{"a@example.com", "b@example.com"}, []string{"c@example.com"}), "X-App: news"), http.StatusOK)
}
