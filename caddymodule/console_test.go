package caddymodule_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"
)

// consoleUser and consolePassword sign in to the console of the tests.
const consoleUser, consolePassword = "support", "s3cret-console"

// consoleHash is consolePassword's bcrypt hash at the lowest cost, so
// that checking it costs the tests nothing (as senderHash in layout_test).
const consoleHash = "$2a$04$kLzfzyhjZ5sz/WtexKG06uEj1Guugt.W8Oqp/LNbXw7/K6Uamx9hq"

// basicAuthBlock is a basic_auth directive for consoleUser on matcher.
func basicAuthBlock(matcher string) string {
	return fmt.Sprintf("basic_auth %s {\n\t\t%s %s\n\t}", matcher, consoleUser, consoleHash)
}

// capSetList is the console's answer to GET .../api/capsets.
type capSetList struct {
	ReadOnly bool          `json:"read_only"`
	CapSets  []capSetEntry `json:"capsets"`
}

// capSetEntry is one cap set in a capSetList.
type capSetEntry struct {
	Name       string      `json:"name"`
	Store      string      `json:"store"`
	DryRun     bool        `json:"dry_run"`
	Dimensions []string    `json:"dimensions"`
	Zoned      bool        `json:"zoned"`
	Inputs     []input     `json:"inputs"`
	Rules      []ruleEntry `json:"rules"`
	Missing    []struct {
		Dimension string `json:"dimension"`
		Words     string `json:"words"`
	} `json:"missing"`
}

// input is a value a cap set's answers depend on beyond its dimensions.
type input struct {
	Param       string   `json:"param"`
	Kind        string   `json:"kind"`
	Placeholder string   `json:"placeholder"`
	Words       string   `json:"words"`
	Rules       []string `json:"rules"`
}

// ruleEntry is one rule of a capSetEntry.
type ruleEntry struct {
	Rule     string   `json:"rule"`
	By       []string `json:"by"`
	Limit    int64    `json:"limit"`
	Window   string   `json:"window"`
	ZoneFrom string   `json:"zone_from"`
}

// consolePage is the page the console serves: support/console.html, embedded.
func consolePage(t *testing.T) []byte {
	t.Helper()
	b, err := os.ReadFile("support/console.html")
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// consoleDo sends a request to the gateway, signed in unless anonymous, with
// extra headers ("Name: value").
func (g *gateway) consoleDo(method, path string, signedIn bool, headers ...string) *answer {
	g.t.Helper()
	req, err := http.NewRequest(method, g.url+path, nil)
	if err != nil {
		g.t.Fatal(err)
	}
	if signedIn {
		req.SetBasicAuth(consoleUser, consolePassword)
	}
	for _, h := range headers {
		k, v, _ := strings.Cut(h, ":")
		req.Header.Set(k, strings.TrimSpace(v))
	}
	res, err := client.Do(req)
	if err != nil {
		g.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		g.t.Fatalf("reading answer: %v", err)
	}
	return &answer{status: res.StatusCode, header: res.Header, body: b}
}

// consoleUsage GETs a usage through the console and returns it by rule.
func (g *gateway) consoleUsage(path string) map[string]ruleUsage {
	g.t.Helper()
	a := g.consoleDo(http.MethodGet, path, true)
	expectStatus(g.t, a, http.StatusOK)
	var u usage
	if err := decodeStrict(a.body, &u); err != nil {
		g.t.Fatalf("usage answer %s: %v", a.body, err)
	}
	out := make(map[string]ruleUsage, len(u.Rules))
	for _, r := range u.Rules {
		out[r.Rule] = r
	}
	return out
}

// consoleSite serves two cap sets (push: per recipient and per recipient
// and content; local: a calendar day in the recipient's zone) and the
// console twice behind basic_auth: on /support/ as mounted, and on /ops/
// with handle_path stripping the prefix.
func consoleSite(t *testing.T, redisLine, upstream, consoleBlock string) string {
	return fmt.Sprintf(`
	%s
	%s
	frequency_cap_console /support/* %s
	handle_path /ops/* {
		frequency_cap_console
	}
	frequency_cap /push {
		name push
		%s
		key_prefix %s
		dimension recipient {json.to}
		dimension content   {json.content}
		rule per_minute {
			by     recipient
			limit  2
			window 1m
		}
		rule same_content {
			by     recipient content
			limit  5
			window 1h
		}
	}
	frequency_cap /local {
		name local
		key_prefix %s
		dimension recipient {json.to}
		rule local_day {
			by       recipient
			limit    3
			calendar day {json.tz} Asia/Shanghai
		}
	}
	reverse_proxy %s`, basicAuthBlock("/support/*"), basicAuthBlock("/ops/*"), consoleBlock, redisLine, testPrefix(), testPrefix(), upstream)
}

// TestConsoleAPI proves the console's JSON endpoints through a real Caddy,
// on both stores and under both mounts (prefix kept, prefix stripped): the
// cap set list, usage and reset answering as the admin API does (a reset
// lets a capped recipient send again), and that none of it is served
// without the site's authentication.
func TestConsoleAPI(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisLine string) {
		up := startUpstream(t)
		g := startGateway(t, consoleSite(t, redisLine, up.addr(), ""))

		for _, path := range []string{"/support/", "/support/api/capsets", "/support/api/capsets/push/usage?recipient=a", "/ops/api/capsets"} {
			if a := g.consoleDo(http.MethodGet, path, false); a.status != http.StatusUnauthorized {
				t.Errorf("GET %s without credentials: %d, want 401", path, a.status)
			}
		}

		for _, mount := range []string{"/support", "/ops"} {
			a := g.consoleDo(http.MethodGet, mount+"/api/capsets", true)
			expectStatus(t, a, http.StatusOK)
			var list capSetList
			if err := decodeStrict(a.body, &list); err != nil {
				t.Fatalf("%s: %v", a.body, err)
			}
			store := "memory"
			if redisLine != "" {
				store = "redis"
			}
			want := capSetList{CapSets: []capSetEntry{
				{Name: "local", Store: "memory", Dimensions: []string{"recipient"}, Zoned: true, Inputs: []input{
					{Param: "json.tz", Kind: "zone", Placeholder: "{json.tz}", Words: "JSON tz", Rules: []string{"local_day"}},
				}, Rules: []ruleEntry{
					{Rule: "local_day", By: []string{"recipient"}, Limit: 3, Window: "calendar day Asia/Shanghai", ZoneFrom: "JSON tz"},
				}},
				{Name: "push", Store: store, Dimensions: []string{"recipient", "content"}, Inputs: []input{}, Rules: []ruleEntry{
					{Rule: "per_minute", By: []string{"recipient"}, Limit: 2, Window: "1m0s"},
					{Rule: "same_content", By: []string{"recipient", "content"}, Limit: 5, Window: "1h0m0s"},
				}},
			}}
			if !reflect.DeepEqual(list, want) {
				t.Errorf("GET %s/api/capsets:\n got  %+v\n want %+v", mount, list, want)
			}
		}

		const x = "carol@example.com"
		for i := 0; i < 2; i++ {
			expectStatus(t, g.send("/push", map[string]any{"to": x, "content": "hi"}), http.StatusOK)
		}
		expectStatus(t, g.send("/push", map[string]any{"to": x, "content": "hi"}), http.StatusTooManyRequests)

		q := "recipient=carol%40example.com&content=hi"
		for _, mount := range []string{"/support", "/ops"} {
			u := g.consoleUsage(mount + "/api/capsets/push/usage?" + q)
			expectUsage(t, u, map[string][2]int64{"per_minute": {2, 0}, "same_content": {2, 3}})
			if pm := u["per_minute"]; pm.Limit != 2 || pm.Window != "1m0s" || pm.ResetAfter < 1 || pm.ResetAfter > 60 {
				t.Errorf("%s: per_minute %+v", mount, pm)
			}
		}
		// The console and the admin API read the same thing (but for where
		// each window begins: the two lookups are milliseconds apart).
		timeless := func(u map[string]ruleUsage) map[string]ruleUsage {
			for k, r := range u {
				r.From = ""
				u[k] = r
			}
			return u
		}
		if !reflect.DeepEqual(timeless(usageOf(t, "push", q)), timeless(g.consoleUsage("/support/api/capsets/push/usage?"+q))) {
			t.Errorf("the admin API and the console answer differently")
		}

		a := g.consoleDo(http.MethodDelete, "/ops/api/capsets/push/usage?recipient="+x, true)
		expectStatus(t, a, http.StatusOK)
		var r reset
		if err := decodeStrict(a.body, &r); err != nil || r.Name != "push" || !reflect.DeepEqual(r.Reset, []string{"per_minute"}) {
			t.Errorf("DELETE answered %s", a.body)
		}
		u := g.consoleUsage("/support/api/capsets/push/usage?" + q)
		expectUsage(t, u, map[string][2]int64{"per_minute": {0, 2}, "same_content": {2, 3}})
		expectStatus(t, g.send("/push", map[string]any{"to": x, "content": "hi"}), http.StatusOK)

		// A zoned calendar rule takes the zone parameter, as in the admin API.
		expectStatus(t, g.send("/local", map[string]any{"to": x, "tz": "Europe/Berlin"}), http.StatusOK)
		lu := g.consoleUsage("/support/api/capsets/local/usage?recipient=" + x + "&zone=Europe/Berlin")["local_day"]
		if lu.Used != 1 || lu.Window != "calendar day Europe/Berlin" {
			t.Errorf("local_day in Berlin: %+v", lu)
		}
	})
}

// TestConsoleErrors proves the console's error answers: those it shares
// with the admin API, an unknown API path, methods, and a reset from
// another origin (which a browser marks so) refused while one from the
// console's own page passes.
func TestConsoleErrors(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, consoleSite(t, "", up.addr(), ""))
	for _, tc := range []struct {
		method, path string
		headers      []string
		status       int
		reason       string
	}{
		{"GET", "/support/api/capsets/nope/usage?recipient=a", nil, 404, "no frequency_cap handler named nope"},
		{"GET", "/support/api/capsets/push/usage?who=a", nil, 400, `unknown dimension "who"`},
		{"GET", "/support/api/capsets/push/usage?content=a", nil, 400, "no rule has all its dimensions given"},
		{"GET", "/support/api/capsets/push/usage?recipient=", nil, 400, "missing value for dimension recipient"},
		{"GET", "/support/api/capsets/push/used?recipient=a", nil, 404, "not found: use api/capsets"},
		{"GET", "/support/api/nothing", nil, 404, "not found"},
		{"POST", "/support/api/capsets/push/usage?recipient=a", nil, 405, "method POST not allowed"},
		{"DELETE", "/support/api/capsets", nil, 405, "method DELETE not allowed"},
		{"POST", "/support/", nil, 405, "method POST not allowed"},
		{"DELETE", "/support/api/capsets/push/usage?recipient=a", []string{"Sec-Fetch-Site: cross-site"}, 403, "reset refused"},
		{"DELETE", "/support/api/capsets/push/usage?recipient=a", []string{"Origin: https://evil.example"}, 403, "reset refused"},
		{"DELETE", "/support/api/capsets/push/usage?recipient=a", []string{"Sec-Fetch-Site: same-origin", "Origin: " + g.url}, 200, ""},
	} {
		a := g.consoleDo(tc.method, tc.path, true, tc.headers...)
		if a.status != tc.status {
			t.Errorf("%s %s %v: %d, want %d; body %s", tc.method, tc.path, tc.headers, a.status, tc.status, a.body)
			continue
		}
		if tc.reason == "" {
			continue
		}
		if reason := a.failure(t).Error; !strings.Contains(reason, tc.reason) {
			t.Errorf("%s %s: reason %q, want one containing %q", tc.method, tc.path, reason, tc.reason)
		}
	}
}

// TestConsolePage proves the page is one self-contained document: HTML,
// no reference to anything outside it, and a Content-Security-Policy that
// allows only its own inline style and script and requests to its origin;
// HEAD gets the headers alone, and any path that is not the API is the
// page (so the mount point may be any path).
func TestConsolePage(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, consoleSite(t, "", up.addr(), ""))
	consolePage := consolePage(t)
	for _, path := range []string{"/support/", "/support/index.html", "/ops/"} {
		a := g.consoleDo(http.MethodGet, path, true)
		expectStatus(t, a, http.StatusOK)
		if ct := a.header.Get("Content-Type"); ct != "text/html; charset=utf-8" {
			t.Errorf("%s: Content-Type %q", path, ct)
		}
		if string(a.body) != string(consolePage) {
			t.Errorf("%s: the body is not the page", path)
		}
		csp := a.header.Get("Content-Security-Policy")
		for _, want := range []string{"default-src 'none'", "script-src 'sha256-", "style-src 'sha256-", "connect-src 'self'", "frame-ancestors 'none'"} {
			if !strings.Contains(csp, want) {
				t.Errorf("%s: Content-Security-Policy %q lacks %q", path, csp, want)
			}
		}
	}
	// The SVG namespace is a name, not an address: nothing is fetched.
	page := strings.ReplaceAll(strings.ToLower(string(consolePage)), `"http://www.w3.org/2000/svg"`, "")
	for _, external := range []string{"src=", "href=", "http:", "https:", "@import", "url("} {
		if strings.Contains(page, external) {
			t.Errorf("the page contains %q: it must load nothing from outside", external)
		}
	}
	if strings.Contains(page, ".innerhtml") || strings.Contains(page, ".outerhtml") || strings.Contains(page, "insertadjacenthtml(") || strings.Contains(page, "document.write(") {
		t.Error("the page's script parses HTML; it must build the DOM with textContent")
	}
	a := g.consoleDo(http.MethodHead, "/support/", true)
	expectStatus(t, a, http.StatusOK)
	if len(a.body) != 0 || a.header.Get("Content-Length") != fmt.Sprint(len(consolePage)) {
		t.Errorf("HEAD: %d bytes of body, Content-Length %q", len(a.body), a.header.Get("Content-Length"))
	}
}

// TestConsoleScoped proves cap_sets and read_only: the console lists and
// answers for the named cap sets only (another is unknown to it), and a
// read-only console reports so and refuses resets while still reading.
func TestConsoleScoped(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, consoleSite(t, "", up.addr(), `{
		cap_sets push
		read_only
	}`))
	a := g.consoleDo(http.MethodGet, "/support/api/capsets", true)
	expectStatus(t, a, http.StatusOK)
	var list capSetList
	if err := decodeStrict(a.body, &list); err != nil {
		t.Fatalf("%s: %v", a.body, err)
	}
	if !list.ReadOnly || len(list.CapSets) != 1 || list.CapSets[0].Name != "push" {
		t.Errorf("the scoped console lists %s", a.body)
	}
	// A cap set cap_sets does not name is answered with the names it
	// does (not whether the config has one).
	other := g.consoleDo(http.MethodGet, "/support/api/capsets/local/usage?recipient=a", true)
	expectStatus(t, other, http.StatusNotFound)
	if !strings.Contains(string(other.body), "no frequency_cap handler named local among this console's cap_sets (push)") {
		t.Errorf("a cap set left out of cap_sets: %s", other.body)
	}
	expectStatus(t, g.consoleDo(http.MethodGet, "/support/api/capsets/push/usage?recipient=a", true), http.StatusOK)
	d := g.consoleDo(http.MethodDelete, "/support/api/capsets/push/usage?recipient=a", true)
	expectStatus(t, d, http.StatusForbidden)
	if reason := d.failure(t).Error; !strings.Contains(reason, "read-only") {
		t.Errorf("read-only reset refused with %q", reason)
	}
	// The other mount has no scope.
	expectStatus(t, g.consoleDo(http.MethodGet, "/ops/api/capsets/local/usage?recipient=a", true), http.StatusOK)
}

// TestConsoleBesideSiteWideCap proves the directive orders need no order
// line when the cap has no matcher: frequency_cap orders itself after
// forward_auth, and the console still answers its own paths (the cap sees
// none of them, so the page and the API get no 400 for a missing
// recipient and spend no quota), while sends elsewhere are capped.
func TestConsoleBesideSiteWideCap(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, fmt.Sprintf(`
	%s
	frequency_cap_console /support/*
	frequency_cap {
		name site
		key_prefix %s
		dimension recipient {json.to}
		rule per_minute {
			by     recipient
			limit  1
			window 1m
		}
	}
	reverse_proxy %s`, basicAuthBlock("/support/*"), testPrefix(), up.addr()))
	expectStatus(t, g.consoleDo(http.MethodGet, "/support/", false), http.StatusUnauthorized)
	expectStatus(t, g.consoleDo(http.MethodGet, "/support/", true), http.StatusOK)
	expectStatus(t, g.consoleDo(http.MethodGet, "/support/api/capsets", true), http.StatusOK)
	expectStatus(t, g.send("/send", map[string]any{"to": "erin"}), http.StatusOK)
	expectStatus(t, g.send("/send", map[string]any{"to": "erin"}), http.StatusTooManyRequests)
	u := g.consoleUsage("/support/api/capsets/site/usage?recipient=erin")
	expectUsage(t, u, map[string][2]int64{"per_minute": {1, 0}})
	expectStatus(t, g.consoleDo(http.MethodDelete, "/support/api/capsets/site/usage?recipient=erin", true), http.StatusOK)
	expectStatus(t, g.send("/send", map[string]any{"to": "erin"}), http.StatusOK)
	if n := up.count(); n != 2 {
		t.Errorf("the upstream received %d requests, want the 2 admitted sends", n)
	}
}

// TestConsoleMountRedirect proves that the console's mount without its
// slash (/support for /support/*, at any depth) redirects to the mount,
// rather than falling through to the upstream, and that the redirect
// leads to the page.
func TestConsoleMountRedirect(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, fmt.Sprintf(`
	%s
	frequency_cap_console /support/*
	frequency_cap_console /help/desk/* {
		public
	}
	reverse_proxy %s`, basicAuthBlock("/support/*"), up.addr()))
	noFollow := &http.Client{Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	for mount, auth := range map[string]bool{"/support": true, "/help/desk": false} {
		res, err := noFollow.Get(g.url + mount)
		if err != nil {
			t.Fatal(err)
		}
		res.Body.Close()
		if res.StatusCode != http.StatusPermanentRedirect || res.Header.Get("Location") != mount+"/" {
			t.Errorf("GET %s: %d to %q, want 308 to %s/", mount, res.StatusCode, res.Header.Get("Location"), mount)
		}
		a := g.consoleDo(http.MethodGet, mount, auth)
		expectStatus(t, a, http.StatusOK)
		if !strings.Contains(string(a.body), "<title>Frequency caps: support console</title>") {
			t.Errorf("GET %s, redirected: not the page", mount)
		}
	}
	if n := up.count(); n != 0 {
		t.Errorf("the upstream received %d requests, want none", n)
	}
}

// TestConsoleScopeKeepsOthersLogs proves that a console limited by
// cap_sets neither lists nor forgets the logs its cap set's rules do not
// read: with a key_prefix shared, a probe read another cap set's channel
// through a console scoped to a cap set beside it, and its DELETE lifted
// that cap set's cap. The console that shows every cap set still lists
// them (they may be a removed rule's).
func TestConsoleScopeKeepsOthersLogs(t *testing.T) {
	eachBackend(t, func(t *testing.T, redisLine string) {
		testConsoleScopeKeepsOthersLogs(t, redisLine)
	})
}

func testConsoleScopeKeepsOthersLogs(t *testing.T, redisLine string) {
	up := startUpstream(t)
	prefix := testPrefix()
	g := startGateway(t, fmt.Sprintf(`
	%s
	%s
	frequency_cap_console /support/* {
		cap_sets mkt
	}
	handle_path /ops/* {
		frequency_cap_console
	}
	frequency_cap /otp {
		name otp
		%s
		key_prefix %s
		dimension recipient {json.to}
		dimension channel {json.channel}
		rule otp_channel {
			by recipient channel
			limit 1
			window 1h
		}
	}
	frequency_cap /mkt {
		name mkt
		%s
		key_prefix %s
		dimension recipient {json.to}
		rule mkt_hour {
			by recipient
			limit 5
			window 1h
		}
	}
	reverse_proxy %s`, basicAuthBlock("/support/*"), basicAuthBlock("/ops/*"), redisLine, prefix, redisLine, prefix, up.addr()))
	for _, want := range []int{http.StatusOK, http.StatusTooManyRequests} {
		expectStatus(t, g.send("/otp", map[string]any{"to": "zoe", "channel": "sms"}), want)
	}
	var held struct {
		Unmatched []json.RawMessage `json:"unmatched"`
	}
	if err := json.Unmarshal(g.consoleDo(http.MethodGet, "/ops/api/capsets/mkt/records?recipient=zoe", true).body, &held); err != nil || len(held.Unmatched) != 1 {
		t.Fatalf("the console showing every cap set lists %+v (%v); want otp's log as unmatched", held, err)
	}
	a := g.consoleDo(http.MethodGet, "/support/api/capsets/mkt/records?recipient=zoe", true)
	expectStatus(t, a, http.StatusOK)
	// Personal data: never sniffed as HTML (a recipient may be <script>).
	for _, h := range []http.Header{a.header, adminDo(t, http.MethodGet, "/frequency_cap/mkt/records?recipient=zoe").header} {
		if h.Get("X-Content-Type-Options") != "nosniff" || !strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") {
			t.Errorf("a JSON answer's headers: %v", h)
		}
	}
	if err := json.Unmarshal(a.body, &held); err != nil || len(held.Unmatched) != 0 {
		t.Errorf("the console scoped to mkt lists %s (%v); want no unmatched log", a.body, err)
	}
	expectStatus(t, g.consoleDo(http.MethodDelete, "/support/api/capsets/mkt/records?recipient=zoe", true), http.StatusOK)
	expectStatus(t, g.send("/otp", map[string]any{"to": "zoe", "channel": "sms"}), http.StatusTooManyRequests)
}
