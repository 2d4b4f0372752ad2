package caddymodule_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
)

// layoutCap is a cap set of 2 sends a minute per recipient on /v1/*, named
// layout so that the admin API can read its usage.
func layoutCap() string {
	return fmt.Sprintf(`
	frequency_cap /v1/* {
		name layout
		key_prefix %s
		dimension recipient {json.to}
		rule recipient_minute {
			by recipient
			limit 2
			window 1m
		}
	}`, testPrefix())
}

// senderHash is the password of the basic_auth user "sender": a bcrypt
// hash at the lowest cost, so that checking it costs the tests nothing.
const senderHash = "$2a$04$7.ypEShfXUdgDRzpavwsXeAZolcJvbci5Kpfsy/fiPBTZorEWORw2" // "s3cret"

// TestCapAppliesInEverySiteLayout proves that frequency_cap caps wherever
// it is written in a site block, with no order line: for each layout three
// sends to one recipient get 200, 200, 429 and the upstream (or the
// respond handler) sees exactly the two admitted ones. Before the
// directive ordered itself after forward_auth, every layout with handle,
// handle_path, route or respond let all three through.
func TestCapAppliesInEverySiteLayout(t *testing.T) {
	layouts := []struct {
		name string
		// site is the inside of the site block; %[1]s is the cap set,
		// %[2]s the upstream's address.
		site string
		// upstreamSees is false when the layout answers with respond
		// instead of proxying.
		upstreamSees bool
	}{
		{"reverse_proxy in the same block", "%[1]s\nreverse_proxy %[2]s", true},
		{"cap written after reverse_proxy", "reverse_proxy %[2]s\n%[1]s", true},
		{"handle", "%[1]s\nhandle /v1/* {\n reverse_proxy %[2]s\n}", true},
		{"handle_path", "%[1]s\nhandle_path /v1/* {\n reverse_proxy %[2]s\n}", true},
		{"route", "%[1]s\nroute /v1/* {\n reverse_proxy %[2]s\n}", true},
		{"handle with a respond fallback", "handle /v1/* {\n reverse_proxy %[2]s\n}\nrespond 404\n%[1]s", true},
		{"respond", "%[1]s\nrespond `{\"status\":\"queued\"}` 200", false},
		{"cap inside a route block, before the proxy", "route /v1/* {\n%[1]s\nreverse_proxy %[2]s\n}", true},
	}
	for _, l := range layouts {
		t.Run(l.name, func(t *testing.T) {
			up := startUpstream(t)
			g := startGateway(t, fmt.Sprintf(l.site, layoutCap(), up.addr()))
			for i, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
				a := g.send("/v1/send", map[string]any{"to": "alice", "content": fmt.Sprint(i)})
				expectStatus(t, a, want)
			}
			if !l.upstreamSees {
				return
			}
			if n := up.count(); n != 2 {
				t.Errorf("the upstream received %d sends, want the 2 admitted", n)
			}
		})
	}
}

// TestAuthenticationFailuresSpendNoQuota proves that the cap runs after
// basic_auth and forward_auth, whatever the order they are written in: a
// request that fails authentication gets 401 and records nothing (the
// admin API's usage stays 0), and authenticated sends are capped as usual.
func TestAuthenticationFailuresSpendNoQuota(t *testing.T) {
	auth := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Api-Key") != "key" {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(auth.Close)
	authenticators := []struct {
		name  string
		site  string
		creds []string // what an authenticated request carries
	}{
		{"basic_auth", "basic_auth /v1/* {\n sender " + senderHash + "\n}", []string{"Authorization: Basic c2VuZGVyOnMzY3JldA=="}},
		{"forward_auth", "forward_auth /v1/* " + auth.Listener.Addr().String() + " {\n uri /check\n}", []string{"X-Api-Key: key"}},
	}
	for _, a := range authenticators {
		t.Run(a.name, func(t *testing.T) {
			up := startUpstream(t)
			// The cap is written first, the authenticator after it.
			g := startGateway(t, layoutCap()+"\n"+a.site+"\nhandle /v1/* {\n reverse_proxy "+up.addr()+"\n}")
			for range 5 {
				expectStatus(t, g.send("/v1/send", map[string]any{"to": "alice"}), http.StatusUnauthorized)
			}
			expectUsage(t, usageOf(t, "layout", "recipient=alice"), map[string][2]int64{"recipient_minute": {0, 2}})
			for _, want := range []int{http.StatusOK, http.StatusOK, http.StatusTooManyRequests} {
				expectStatus(t, g.send("/v1/send", map[string]any{"to": "alice"}, a.creds...), want)
			}
			if n := up.count(); n != 2 {
				t.Errorf("the upstream received %d sends, want the 2 admitted", n)
			}
		})
	}
}
