package caddymodule_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// TestConsoleWords proves, in headless Chromium, that the console speaks
// as support staff do: windows as "1 min", "24 h" and "calendar day
// (Asia/Shanghai)"; a quiet rule as its range and whether it holds now,
// not as a count of 0 of 0; a shadow rule and the exempt values marked as
// such. At a phone's width (390 px) nothing scrolls sideways. Screenshots
// at 390 px and 1280 px are saved (FREQCAP_SCREENSHOTS names the folder;
// by default the test's temporary one) and their paths logged.
func TestConsoleWords(t *testing.T) {
	b := startBrowser(t)
	up := startUpstream(t)
	// A quiet range that does not hold now: it starts two hours from now.
	start := time.Now().UTC().Add(2 * time.Hour).Truncate(time.Minute)
	quiet := start.Format("15:04") + "-" + start.Add(time.Hour).Format("15:04")
	g := startGateway(t, fmt.Sprintf(`
	%s
	frequency_cap_console /support/*
	frequency_cap /push {
		name words
		key_prefix %s
		exempt {json.priority} otp critical
		dimension recipient {json.to}
		dimension content   {json.body}
		rule night {
			quiet %s UTC
		}
		rule per_minute {
			by     recipient
			limit  15
			window 1m
		}
		rule per_day {
			by     recipient
			limit  50
			window 24h
		}
		rule shanghai_day {
			by       recipient
			limit    5
			calendar day Asia/Shanghai
		}
		rule trial {
			by     recipient
			limit  1
			window 1h
			dry_run
		}
		rule same_content {
			by     recipient content
			limit  2
			window 59s
		}
		rule late_day {
			by       recipient
			limit    5
			calendar day %s
		}
	}
	reverse_proxy %s`, basicAuthBlock("/support/*"), testPrefix(), quiet, lateZone(time.Now()), up.addr()))
	const who = "+8613800138000"
	// One send with a body kept whole in the key, one with a body long
	// enough to be kept as its hash: the look-up by recipient shows a log
	// for each, naming it, and neither may widen a phone's page.
	unbroken := strings.Repeat("x", 64)
	expectStatus(t, g.send("/push", map[string]any{"to": who, "body": unbroken}), http.StatusOK)
	expectStatus(t, g.send("/push", map[string]any{"to": who, "body": strings.Repeat("Your code is 123456. ", 5)}), http.StatusOK)

	const sec = `section[data-capset="words"] `
	for _, width := range []int64{390, 1280} {
		b.do(t, fmt.Sprintf("looking up %s at %d px", who, width),
			chromedp.EmulateViewport(width, 900),
			chromedp.Navigate(g.url+"/support/"),
			chromedp.WaitVisible(sec+`input[name="recipient"]`),
			chromedp.SendKeys(sec+`input[name="recipient"]`, who),
			chromedp.Click(sec+`button[type="submit"]`),
			chromedp.WaitVisible(sec+`.rule[data-rule="per_minute"][data-used="2"]`),
		)
		meta := func(rule string) string {
			return read(t, b, rule, chromedp.Text(sec+`.rule[data-rule="`+rule+`"] .rule-meta`))
		}
		for rule, want := range map[string]string{
			"per_minute":   "15 per 1 min",
			"per_day":      "50 per 24 h",
			"shanghai_day": "5 per calendar day (Asia/Shanghai)",
			"night":        "quiet " + strings.Replace(quiet, "-", "–", 1) + " UTC",
		} {
			if got := meta(rule); !strings.HasSuffix(got, want) {
				t.Errorf("%s reads %q, want it to end %q", rule, got, want)
			}
		}
		state := read(t, b, "the quiet state", chromedp.Text(sec+`.rule[data-rule="night"] .quiet-state`))
		if state != "not now · next quiet at "+start.Format("15:04") {
			t.Errorf("the quiet rule reads %q", state)
		}
		if got := read(t, b, "the shadow rule", chromedp.Text(sec+`.rule[data-rule="trial"] .rule-name`)); !strings.Contains(got, "dry run: never refuses") {
			t.Errorf("the shadow rule reads %q", got)
		}
		if got := read(t, b, "the exempt line", chromedp.Text(sec+`.exempt`)); !strings.Contains(got, "JSON priority = otp or critical") {
			t.Errorf("the exempt line reads %q", got)
		}
		// The timeline: one mark a recorded send, the limit line, and
		// when the next send frees up.
		logs := read(t, b, "the content logs", chromedp.Evaluate[[]string](`[...document.querySelectorAll('`+sec+`.rule[data-rule="same_content"] .log-values')].map(e => e.textContent).sort()`))
		if len(logs) != 2 || !strings.HasPrefix(logs[0], "content = #") || !strings.HasSuffix(logs[0], " (hash of a long value)") || logs[1] != "content = "+unbroken {
			t.Errorf("the content logs read %q; want one hashed, one whole", logs)
		}
		for rule, want := range map[string]int{"per_minute": 2, "per_day": 2, "shanghai_day": 2, "trial": 2} {
			marks := read(t, b, rule+"'s marks", chromedp.Evaluate[int](`document.querySelectorAll('`+sec+`.rule[data-rule="`+rule+`"] svg.timeline circle.send').length`))
			if marks != want {
				t.Errorf("%s's timeline has %d marks, want %d (one a recorded send)", rule, marks, want)
			}
		}
		lines := read(t, b, "the limit and frees-up lines", chromedp.Evaluate[int](`document.querySelectorAll('`+sec+`.rule[data-rule="trial"] svg.timeline line.limit, `+sec+`.rule[data-rule="trial"] svg.timeline line.frees').length`))
		if lines != 2 {
			t.Errorf("the full rule's timeline has %d of its limit and frees-up lines, want 2", lines)
		}
		// late_day's "now" is near the end of its day, where its "frees up"
		// label is: no two labels may cover each other.
		if overlaps := read(t, b, "overlapping labels", chromedp.Evaluate[[]string](overlappingLabels)); len(overlaps) > 0 {
			t.Errorf("at %d px these labels overlap: %q", width, overlaps)
		}
		sideways := read(t, b, "the page width", chromedp.Evaluate[bool](`document.documentElement.scrollWidth > document.documentElement.clientWidth`))
		if sideways {
			t.Errorf("at %d px the page scrolls sideways", width)
		}
		shot := read(t, b, "a screenshot", chromedp.FullScreenshot(100))
		dir := os.Getenv("FREQCAP_SCREENSHOTS")
		if dir == "" {
			dir = t.TempDir()
		}
		file := filepath.Join(dir, fmt.Sprintf("console-%dpx.png", width))
		if err := os.WriteFile(file, shot, 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("screenshot at %d px: %s", width, file)
	}

	// The hash a listing shows, pasted as the content beside her, reads
	// the long body's log, and the heading says it read a hash.
	hash := read(t, b, "the hash shown", chromedp.Evaluate[string](`[...document.querySelectorAll('`+sec+`.rule[data-rule="same_content"] .log-values bdi')].map(e => e.textContent).find(v => v.startsWith("#")) || ""`))
	if len(hash) != 33 {
		t.Fatalf("the listing shows no hash of the long body: %q", hash)
	}
	b.do(t, "looking up her and the hash as the content",
		chromedp.SendKeys(sec+`input[name="content"]`, hash),
		chromedp.Click(sec+`button[type="submit"]`),
		chromedp.Poll[chromedp.Void](`document.querySelector('`+sec+`.for').textContent.startsWith("Usage for")`),
	)
	if got := read(t, b, "the heading", chromedp.Text(sec+`.for`)); got != "Usage for recipient = "+who+", content = "+hash+" (hash of a long value)" {
		t.Errorf("the heading reads %q", got)
	}
	if used := read(t, b, "the content rule", chromedp.Evaluate[string](`document.querySelector('`+sec+`.rule[data-rule="same_content"]').dataset.used`)); used != "1" {
		t.Errorf("the content rule reads %s used, want the long body's 1", used)
	}
	b.expectQuiet(t)
}

// lateZone is a fixed zone in which it is now 23:xx, so that a calendar
// day's "now" is near its end.
func lateZone(now time.Time) string {
	o := (23 - now.UTC().Hour() + 24) % 24
	if o > 14 {
		o -= 24
	}
	switch {
	case o > 0:
		return fmt.Sprintf("Etc/GMT-%d", o)
	case o < 0:
		return fmt.Sprintf("Etc/GMT+%d", -o)
	}
	return "Etc/GMT"
}

// overlappingLabels lists, as "a | b", the pairs of labels on the page
// whose boxes cover each other: a timeline's texts, a form's fields and
// buttons, the parts of a rule's head and of its numbers, a cap set's
// title.
const overlappingLabels = `(() => {
	const over = (a, b) => a.width > 0 && b.width > 0 && a.left < b.right - 0.5 && b.left < a.right - 0.5 && a.top < b.bottom - 0.5 && b.top < a.bottom - 0.5;
	const groups = [];
	for (const svg of document.querySelectorAll("svg.timeline")) groups.push([...svg.querySelectorAll("text")]);
	for (const f of document.querySelectorAll("form")) groups.push([...f.children]);
	for (const n of document.querySelectorAll(".nums, .rule-head, h2")) groups.push([...n.children]);
	const out = [];
	for (const g of groups) {
		for (let i = 0; i < g.length; i++) {
			for (let j = i + 1; j < g.length; j++) {
				if (over(g[i].getBoundingClientRect(), g[j].getBoundingClientRect())) out.push(g[i].textContent + " | " + g[j].textContent);
			}
		}
	}
	return out;
})()`
