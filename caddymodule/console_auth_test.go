package caddymodule_test

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// consoleAuthSite is a cap set and a console on /support/ with auth in
// front of it (any directives, or none) and the console's own block.
func consoleAuthSite(up, auth, block string) string {
	return fmt.Sprintf(`
	%s
	frequency_cap_console /support/* %s
	frequency_cap /send {
		name authcaps
		key_prefix %s
		dimension recipient {json.to}
		rule per_minute {
			by     recipient
			limit  1
			window 1m
		}
	}
	reverse_proxy %s`, auth, block, testPrefix(), up)
}

// TestConsoleNeedsAuthentication proves the console is safe when nobody
// protected it: without authentication in front, the page, the API and
// a reset answer 403, saying how to put basic_auth or forward_auth in
// front, and a reset changes nothing. basic_auth, forward_auth with
// copy_headers (and user_header), and public each open it.
func TestConsoleNeedsAuthentication(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, consoleAuthSite(up.addr(), "", ""))
	expectStatus(t, g.send("/send", map[string]any{"to": "+15550100"}), http.StatusOK)

	a := g.consoleDo(http.MethodGet, "/support/", false)
	expectStatus(t, a, http.StatusForbidden)
	if !strings.Contains(string(a.body), "basic_auth") || !strings.Contains(a.header.Get("Content-Type"), "text/html") {
		t.Errorf("the page without authentication: %s %s", a.header.Get("Content-Type"), a.body)
	}
	for _, path := range []string{"/support/api/capsets", "/support/api/capsets/authcaps/usage?recipient=%2B15550100"} {
		expectFailure(t, g.consoleDo(http.MethodGet, path, false), http.StatusForbidden, "put basic_auth (or forward_auth with copy_headers")
	}
	expectFailure(t, g.consoleDo(http.MethodDelete, "/support/api/capsets/authcaps/usage?recipient=%2B15550100", false), http.StatusForbidden, "authenticated users")
	// A client naming itself in a header is not authenticated.
	expectStatus(t, g.consoleDo(http.MethodGet, "/support/api/capsets", false, "Remote-User: mallory"), http.StatusForbidden)
	expectStatus(t, g.send("/send", map[string]any{"to": "+15550100"}), http.StatusTooManyRequests)

	t.Run("basic_auth", func(t *testing.T) {
		g := startGateway(t, consoleAuthSite(up.addr(), basicAuthBlock("/support/*"), ""))
		expectStatus(t, g.consoleDo(http.MethodGet, "/support/", true), http.StatusOK)
		expectStatus(t, g.consoleDo(http.MethodGet, "/support/api/capsets", true), http.StatusOK)
	})
	t.Run("forward_auth", func(t *testing.T) {
		auth := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Header.Get("X-Staff-Token") != "t0ken" {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			w.Header().Set("Remote-User", "carol")
		}))
		t.Cleanup(auth.Close)
		fa := fmt.Sprintf("forward_auth /support/* %s {\n\t\turi /check\n\t\tcopy_headers Remote-User\n\t}", auth.Listener.Addr())
		g := startGateway(t, consoleAuthSite(up.addr(), fa, "{\n\t\tuser_header Remote-User\n\t}"))
		expectStatus(t, g.consoleDo(http.MethodGet, "/support/api/capsets", false, "X-Staff-Token: t0ken"), http.StatusOK)
		expectStatus(t, g.consoleDo(http.MethodGet, "/support/", false, "X-Staff-Token: t0ken"), http.StatusOK)
		// forward_auth refuses, whatever Remote-User the client sends.
		expectStatus(t, g.consoleDo(http.MethodGet, "/support/api/capsets", false, "Remote-User: mallory"), http.StatusUnauthorized)
	})
	t.Run("public", func(t *testing.T) {
		g := startGateway(t, consoleAuthSite(up.addr(), "", "{\n\t\tpublic\n\t}"))
		expectStatus(t, g.consoleDo(http.MethodGet, "/support/", false), http.StatusOK)
		expectStatus(t, g.consoleDo(http.MethodGet, "/support/api/capsets", false), http.StatusOK)
	})
}

// TestResetsCounted proves every reset is counted by where it came from,
// caddy_frequency_cap_resets_total{handler,source="admin|console"}.
func TestResetsCounted(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, consoleAuthSite(up.addr(), basicAuthBlock("/support/*"), ""))
	before, _ := scrape(t)
	expectStatus(t, adminDo(t, http.MethodDelete, "/frequency_cap/authcaps/usage?recipient=a"), http.StatusOK)
	for range 2 {
		expectStatus(t, g.consoleDo(http.MethodDelete, "/support/api/capsets/authcaps/usage?recipient=a", true), http.StatusOK)
	}
	after, _ := scrape(t)
	expectDeltas(t, before, after, map[string]float64{
		series("caddy_frequency_cap_resets_total", "handler", "authcaps", "source", "admin"):   1,
		series("caddy_frequency_cap_resets_total", "handler", "authcaps", "source", "console"): 2,
	})
}
