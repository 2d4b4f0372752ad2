package caddymodule_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// browser is a headless Chromium that records every JavaScript dialog
// (alert, confirm, prompt: the console opens none) and every uncaught
// exception of the pages it shows.
type browser struct {
	ctx        context.Context
	mu         sync.Mutex
	dialogs    []string
	exceptions []string
}

// startBrowser starts Debian's chromium, fresh profile, no network of its
// own (no QUIC, no background requests, no updates, no sync), signed in to
// the console with consoleUser. Without chromium on PATH the test is
// skipped, unless FREQCAP_REQUIRE_BROWSER=1 (as CI sets) makes that a
// failure.
func startBrowser(t *testing.T) *browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		path, err = exec.LookPath("chromium-browser")
	}
	if err != nil {
		if os.Getenv("FREQCAP_REQUIRE_BROWSER") == "1" {
			t.Fatalf("chromium is not on PATH and FREQCAP_REQUIRE_BROWSER=1: install it (apt-get install chromium)")
		}
		t.Skip("chromium is not on PATH: skipping a test that needs a real browser (set FREQCAP_REQUIRE_BROWSER=1 to make this a failure)")
	}
	profile := t.TempDir()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Headless,
		chromedp.NoSandbox, // as root, Chromium refuses to start with its sandbox
		chromedp.Flag("disable-gpu", true),
		chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-quic", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(profile),
	)
	ctx, cancelCtx := chromedp.NewContext(allocCtx, chromedp.WithErrorf(t.Logf))
	// Registered after TempDir, so run before its removal: Chromium has
	// exited by then.
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc()
	})

	b := &browser{ctx: ctx}
	// The first call starts the browser; a timeout on it would stop the
	// browser with it, so the steps get theirs in run.
	err = chromedp.Listen(ctx, func(ev any) {
		b.mu.Lock()
		defer b.mu.Unlock()
		switch e := ev.(type) {
		case *page.EventJavascriptDialogOpening:
			b.dialogs = append(b.dialogs, string(e.Type)+": "+e.Message)
			// Dismiss it, or the page would hang (the test fails anyway);
			// a listener must not run a command itself.
			go chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		case *runtime.EventExceptionThrown:
			text := e.ExceptionDetails.Text
			if ex := e.ExceptionDetails.Exception; ex != nil {
				text += " " + ex.Description
			}
			b.exceptions = append(b.exceptions, text)
		}
	})
	if err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	auth := base64.StdEncoding.EncodeToString([]byte(consoleUser + ":" + consolePassword))
	if _, err := chromedp.Call(ctx, network.Enable, network.EnableParams{}); err != nil {
		t.Fatalf("enabling the network domain: %v", err)
	}
	if _, err := chromedp.Call(ctx, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": "Basic " + auth}}); err != nil {
		t.Fatalf("signing in: %v", err)
	}
	return b
}

// do runs actions, failing the test with what it was doing.
func (b *browser) do(t *testing.T, doing string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", doing, err)
	}
}

// read runs one action that returns a value.
func read[T any](t *testing.T, b *browser, what string, action chromedp.Action[T]) T {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	v, err := chromedp.Run(ctx, action)
	if err != nil {
		t.Fatalf("reading %s: %v", what, err)
	}
	return v
}

// expectQuiet fails the test if a page opened a dialog or threw.
func (b *browser) expectQuiet(t *testing.T) {
	t.Helper()
	b.mu.Lock()
	defer b.mu.Unlock()
	if len(b.dialogs) > 0 {
		t.Errorf("the page opened dialogs: %q", b.dialogs)
	}
	if len(b.exceptions) > 0 {
		t.Errorf("the page threw: %q", b.exceptions)
	}
}

// TestConsoleBrowser proves the console in a real headless Chromium, as
// support staff use it: a recipient capped at 2 a minute shows a full bar
// (2 of 2), with every log held about her (one a content, naming it);
// Reset asks for confirmation on the page, then forgets all of it; the
// recipient's next send is admitted; with a content given too, the page
// shows the usage of the rules those complete. A recipient whose name is markup is
// shown as text: no element of it reaches the DOM and no dialog opens.
func TestConsoleBrowser(t *testing.T) {
	b := startBrowser(t)
	up := startUpstream(t)
	g := startGateway(t, consoleSite(t, "", up.addr(), ""))

	const x = "dave@example.com"
	for i := 0; i < 2; i++ {
		expectStatus(t, g.send("/push", map[string]any{"to": x, "content": "hi"}), http.StatusOK)
	}
	expectStatus(t, g.send("/push", map[string]any{"to": x, "content": "hi"}), http.StatusTooManyRequests)

	const push = `section[data-capset="push"] `
	perMinute := func(used string) string { return push + `.rule[data-rule="per_minute"][data-used="` + used + `"]` }
	b.do(t, "opening the console",
		chromedp.Navigate(g.url+"/support/"),
		chromedp.WaitVisible(push+`input[name="recipient"]`),
	)
	capsets := read(t, b, "the cap sets", chromedp.Evaluate[[]string](`[...document.querySelectorAll("section[data-capset]")].map(s => s.dataset.capset)`))
	zoneInputs := read(t, b, "the zone inputs", chromedp.Evaluate[int](`document.querySelectorAll('section[data-capset="local"] input[data-kind="zone"][name="json.tz"]').length`))
	if strings.Join(capsets, ",") != "local,push" || zoneInputs != 1 {
		t.Errorf("the page shows cap sets %q with %d zone inputs for local, want local,push and 1", capsets, zoneInputs)
	}

	b.do(t, "looking up "+x,
		chromedp.SendKeys(push+`input[name="recipient"]`, x),
		chromedp.Click(push+`button[type="submit"]`),
		chromedp.WaitVisible(perMinute("2")),
	)
	used := read(t, b, "used", chromedp.Text(perMinute("2")+` .used`))
	frees := read(t, b, "reset_after", chromedp.Text(perMinute("2")+` .reset-after`))
	fill := read(t, b, "the bar", chromedp.Evaluate[string](`document.querySelector('`+perMinute("2")+` .fill').style.width`))
	if used != "2 of 2 used" || !strings.HasPrefix(frees, "frees up in ") || fill != "100%" {
		t.Errorf("capped recipient: %q, %q, bar width %q; want 2 of 2 used, frees up in, 100%%", used, frees, fill)
	}
	// The recipient alone is looked up whole: every log held about her,
	// the content rule's once a content, saying which.
	heading := read(t, b, "the heading", chromedp.Text(push+`.for`))
	content := read(t, b, "the content log", chromedp.Text(push+`.rule[data-rule="same_content"] .log-values`))
	if heading != "Everything held about recipient = "+x || content != "content = hi" {
		t.Errorf("the look-up reads %q, the content rule's log %q", heading, content)
	}

	b.do(t, "asking to reset "+x,
		chromedp.Click(push+`button.reset`),
		chromedp.WaitVisible(push+`button.confirm-yes`),
	)
	confirmText := read(t, b, "the confirmation", chromedp.Text(push+`.confirm-text`))
	forget := read(t, b, "the logs to forget", chromedp.Evaluate[[]string](`[...document.querySelectorAll('`+push+`.confirm .forget li')].map(e => e.textContent)`))
	if !strings.Contains(confirmText, "Forget everything held about recipient = "+x) || strings.Join(forget, "; ") != "per_minute: 2 used; same_content (content = hi): 2 used" {
		t.Errorf("the confirmation reads %q, listing %q", confirmText, forget)
	}
	b.do(t, "confirming the reset",
		chromedp.Click(push+`button.confirm-yes`),
		chromedp.WaitVisible(perMinute("0")),
	)
	used = read(t, b, "used", chromedp.Text(perMinute("0")+` .used`))
	fill = read(t, b, "the bar", chromedp.Evaluate[string](`document.querySelector('`+perMinute("0")+` .fill').style.width`))
	status := read(t, b, "the status", chromedp.Text(push+`.status.done`))
	if used != "0 of 2 used" || fill != "0%" || status != "Reset 2 logs." {
		t.Errorf("after the reset: %q, bar width %q, status %q", used, fill, status)
	}
	if n := read(t, b, "content logs", chromedp.Evaluate[int](`document.querySelectorAll('`+push+`.rule[data-rule="same_content"]').length`)); n != 0 {
		t.Errorf("after the reset %d content logs remain", n)
	}
	expectStatus(t, g.send("/push", map[string]any{"to": x, "content": "hi"}), http.StatusOK)

	// With every dimension of a rule given, the usage of those rules.
	b.do(t, "looking up "+x+" and a content",
		chromedp.SendKeys(push+`input[name="content"]`, "hi"),
		chromedp.Click(push+`button[type="submit"]`),
		chromedp.WaitVisible(push+`.rule[data-rule="same_content"][data-used="1"]`),
	)
	if heading := read(t, b, "the heading", chromedp.Text(push+`.for`)); heading != "Usage for recipient = "+x+", content = hi" {
		t.Errorf("the usage heading reads %q", heading)
	}
	read(t, b, "clearing the content", chromedp.Evaluate[string](`document.querySelector('`+push+`input[name="content"]').value = ""`))

	const evil = `<script>alert(1)</script><img src=x onerror=alert(2)>`
	// A content that turns the text after it right to left (U+202E).
	const reversing = "promo \u202e"
	// Sent twice, so that the look-up's view (2 used) cannot be taken for
	// the one before it (dave's usage, 1 used).
	for i := 0; i < 2; i++ {
		expectStatus(t, g.send("/push", map[string]any{"to": evil, "content": reversing}), http.StatusOK)
	}
	b.do(t, "looking up a recipient named with markup",
		chromedp.SetValue(push+`input[name="recipient"]`, evil),
		chromedp.Click(push+`button[type="submit"]`),
		chromedp.WaitVisible(perMinute("2")),
	)
	heading = read(t, b, "the heading", chromedp.Text(push+`.for`))
	injected := read(t, b, "injected elements", chromedp.Evaluate[int](`document.querySelectorAll("main script, main img").length`))
	if heading != "Everything held about recipient = "+evil {
		t.Errorf("the heading reads %q, want the name as text", heading)
	}
	if injected != 0 {
		t.Errorf("%d script or img elements made it into the page", injected)
	}
	// Each value sits in a <bdi> of its own, so that its direction stays
	// inside it: the names and counts after it read in order.
	isolated := read(t, b, "the values isolated", chromedp.Evaluate[[]string](`[...document.querySelectorAll('`+push+`.for bdi, `+push+`.log-values bdi')].map(e => e.textContent)`))
	if strings.Join(isolated, "|") != evil+"|"+reversing {
		t.Errorf("the values in <bdi> elements: %q, want the recipient's and the content's", isolated)
	}
	b.do(t, "waiting for a dialog that must not open", chromedp.Sleep(300*time.Millisecond))

	// Exempt sends are counted, and said so: a rule of 3 an hour, 3 sends
	// and 2 OTPs past it, reads "5 of 3 used, 2 of them exempt", and the
	// two OTPs are the hollow marks of its timeline.
	g.load(fmt.Sprintf(`
	%s
	frequency_cap_console /support/*
	frequency_cap /push {
		name otp
		key_prefix %s
		exempt {json.priority} otp
		dimension recipient {json.to}
		rule marketing {
			by     recipient
			limit  3
			window 1h
		}
	}
	reverse_proxy %s`, basicAuthBlock("/support/*"), testPrefix(), up.addr()))
	for _, priority := range []string{"", "", "", "otp", "otp"} {
		expectStatus(t, g.send("/push", map[string]any{"to": "erin", "priority": priority}), http.StatusOK)
	}
	const otp = `section[data-capset="otp"] `
	marketing := otp + `.rule[data-rule="marketing"][data-used="5"]`
	b.do(t, "looking up a recipient sent 2 OTPs past her cap",
		chromedp.Navigate(g.url+"/support/"),
		chromedp.WaitVisible(otp+`input[name="recipient"]`),
		chromedp.SendKeys(otp+`input[name="recipient"]`, "erin"),
		chromedp.Click(otp+`button[type="submit"]`),
		chromedp.WaitVisible(marketing),
	)
	used = read(t, b, "used", chromedp.Text(marketing+` .used`))
	marks := read(t, b, "the timeline's marks", chromedp.Evaluate[[]string](`[...document.querySelectorAll('`+marketing+` circle.send')].map(c => c.getAttribute("class") + ": " + c.textContent.replace(/^.* · /, ""))`))
	want := "send: 1 send; send: 1 send; send: 1 send; send exempt: 1 send, exempt; send exempt: 1 send, exempt"
	if used != "5 of 3 used, 2 of them exempt" || strings.Join(marks, "; ") != want {
		t.Errorf("exempt sends read %q, marked %q; want 5 of 3 used, 2 of them exempt, marked %q", used, strings.Join(marks, "; "), want)
	}
	if n := read(t, b, "unknown fields shown", chromedp.Evaluate[int](`document.querySelectorAll('`+marketing+` .extra dt').length`)); n != 0 {
		t.Errorf("the rule shows %d fields the page does not know", n)
	}
	b.expectQuiet(t)
}

// TestConsoleBrowserCredentialsInURL proves that a console opened with
// the user and password in its address (http://user:pass@host/support/)
// works: it is opened so and a look-up answers. Chromium drops the
// credentials from the page's address (other browsers keep them, and
// there fetch refuses a request resolved against it), so the test also
// records every address the page fetches: each must be whole, made from
// the origin (which never carries credentials), not resolved against the
// page's address.
func TestConsoleBrowserCredentialsInURL(t *testing.T) {
	b := startBrowser(t)
	up := startUpstream(t)
	g := startGateway(t, consoleSite(t, "", up.addr(), ""))
	expectStatus(t, g.send("/push", map[string]any{"to": "erin", "content": "hi"}), http.StatusOK)
	u, err := url.Parse(g.url + "/support/")
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(consoleUser, consolePassword)
	const record = `(() => {
		const fetch0 = window.fetch;
		window.fetched = [];
		window.fetch = function (input, init) {
			window.fetched.push(String(input));
			return fetch0.call(this, input, init);
		};
	})()`
	const push = `section[data-capset="push"] `
	if _, err := chromedp.Call(b.ctx, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: record}); err != nil {
		t.Fatalf("recording what the page fetches: %v", err)
	}
	b.do(t, "opening "+u.Redacted()+" and looking up erin",
		chromedp.Navigate(u.String()),
		chromedp.WaitVisible(push+`input[name="recipient"]`),
		chromedp.SendKeys(push+`input[name="recipient"]`, "erin"),
		chromedp.Click(push+`button[type="submit"]`),
		chromedp.WaitVisible(push+`.rule[data-rule="per_minute"][data-used="1"]`),
	)
	fetched := read(t, b, "the addresses fetched", chromedp.Evaluate[[]string](`window.fetched`))
	origin := read(t, b, "the origin", chromedp.Evaluate[string](`location.origin`))
	if len(fetched) < 2 {
		t.Errorf("the page fetched %q; want the cap sets and the look-up", fetched)
	}
	for _, f := range fetched {
		if !strings.HasPrefix(f, origin+"/") {
			t.Errorf("the page fetched %q: not an address made from its origin %s", f, origin)
		}
	}
	if errs := read(t, b, "errors shown", chromedp.Evaluate[int](`document.querySelectorAll(".status.error").length`)); errs != 0 {
		t.Errorf("the page shows %d errors", errs)
	}
	b.expectQuiet(t)
}

// TestConsoleBrowserConflict proves that a name several unnamed cap sets
// with other settings share is shown as that, with no form to look
// anyone up: the listing showed one of them as if it were alone.
func TestConsoleBrowserConflict(t *testing.T) {
	b := startBrowser(t)
	up := startUpstream(t)
	g := startGateway(t, fmt.Sprintf(`
	%s
	frequency_cap_console /support/*
	frequency_cap /a {
		key_prefix %s
		dimension recipient {json.to}
		%s
	}
	frequency_cap /b {
		key_prefix %[2]s
		dimension recipient {json.to}
		%[4]s
	}
	reverse_proxy %[5]s`, basicAuthBlock("/support/*"), testPrefix(), ruleBlock("r", "recipient", 5), ruleBlock("r", "recipient", 6), up.addr()))
	const def = `section[data-capset="default"] `
	b.do(t, "opening the console", chromedp.Navigate(g.url+"/support/"), chromedp.WaitVisible(def+`.status.error`))
	text := read(t, b, "the conflict", chromedp.Text(def+`.status.error`))
	forms := read(t, b, "its forms", chromedp.Evaluate[int](`document.querySelectorAll('`+def+`form').length`))
	if !strings.Contains(text, "several frequency_cap cap sets without a name") || forms != 0 {
		t.Errorf("the default cap set reads %q with %d forms; want the conflict and none", text, forms)
	}
	b.expectQuiet(t)
}
