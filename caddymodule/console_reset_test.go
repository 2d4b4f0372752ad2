package caddymodule_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// heldAnswer is a records answer as these tests read it.
type heldAnswer struct {
	Rules []struct {
		Rule    string            `json:"rule"`
		By      []string          `json:"by"`
		Values  map[string]string `json:"values"`
		Limit   int64             `json:"limit"`
		Window  string            `json:"window"`
		Used    int64             `json:"used"`
		Log     int               `json:"log"`
		Records int               `json:"records"`
		Quiet   *bool             `json:"quiet"`
		Assumed []struct {
			Kind  string `json:"kind"`
			Param string `json:"param"`
			Value string `json:"value"`
			Note  string `json:"note"`
		} `json:"assumed"`
	} `json:"rules"`
	Elsewhere []struct {
		Rule string `json:"rule"`
	} `json:"elsewhere"`
	Unmatched []json.RawMessage `json:"unmatched"`
}

// held GETs .../records through the admin API.
func held(t *testing.T, name, query string) heldAnswer {
	t.Helper()
	a := adminDo(t, http.MethodGet, "/frequency_cap/"+name+"/records?"+query)
	expectStatus(t, a, http.StatusOK)
	var h heldAnswer
	if err := json.Unmarshal(a.body, &h); err != nil {
		t.Fatalf("records answer %s: %v", a.body, err)
	}
	return h
}

// summary lists what the answer holds: rule(values)=used, sorted, leaving
// out what holds nothing.
func (h heldAnswer) summary() string {
	var out []string
	for _, u := range h.Rules {
		if u.Used == 0 && u.Records == 0 {
			continue
		}
		var vs []string
		for k, v := range u.Values {
			vs = append(vs, k+"="+v)
		}
		sort.Strings(vs)
		out = append(out, fmt.Sprintf("%s(%s)=%d", u.Rule, strings.Join(vs, ","), u.Used))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// deviceSite is the cap set: a device whose calendar day and
// quiet hours are those of its X-TZ header, a day limit by tier (Caddy's
// map, fallback 3), one send a title an hour, and two rules kept under
// the campaign (a budget every device of it shares, and the device's
// sends in it), and a ceiling over every send. The quiet range starts two hours from now in Tokyo, so
// that no send of the test falls in it.
func deviceSite(name, storeLine, upstream string) string {
	start := time.Now().In(tokyo()).Add(2 * time.Hour).Truncate(time.Minute)
	return fmt.Sprintf(`
	%s
	frequency_cap_console /support/*
	map {http.request.header.X-Tier} {tier_day} {
		gold    10
		default 3
	}
	frequency_cap /send {
		name       %s
		key_prefix %s
		%s
		dimension device   {http.request.header.X-Device}
		dimension title    {json.title}
		dimension campaign {json.campaign}
		rule device_day {
			by       device
			limit    {tier_day} 3
			calendar day {http.request.header.X-TZ} UTC
		}
		rule same_title_hour {
			by     device title
			limit  1
			window 1h
		}
		rule night {
			quiet %s {http.request.header.X-TZ} UTC
			by    device
		}
		rule campaign_budget {
			by     campaign
			limit  100
			window 24h
			cost   {json.units}
		}
		rule campaign_device {
			by     campaign device
			limit  5
			window 24h
		}
		rule every_send_day {
			limit  1000
			window 24h
		}
	}
	reverse_proxy %s`, basicAuthBlock("/support/*"), name, testPrefix(), storeLine,
		start.Format("15:04")+"-"+start.Add(time.Hour).Format("15:04"), upstream)
}

func tokyo() *time.Location {
	z, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		panic(err)
	}
	return z
}

// TestConsoleResetForgetsAllOfHers proves the console's reset on the
// memory store, Redis and a Redis Cluster: from the view the page opens
// when a zone and a tier are given beside the device, Reset forgets every
// log the device's records list (her day, one log a title), after which
// records lists nothing of hers; the logs kept under the campaign (its
// budget, shared by every device, and her sends in it) and another
// device's are left as they were.
func TestConsoleResetForgetsAllOfHers(t *testing.T) {
	stores := []struct {
		name string
		line func(t *testing.T) string
	}{
		{"memory", func(*testing.T) string { return "" }},
		{"redis", func(t *testing.T) string {
			return "redis {\n\t\t\turl " + redistest.URL(t) + "\n\t\t\ttimeout 2s\n\t\t}"
		}},
		{"cluster", func(t *testing.T) string {
			c := redistest.StartCluster(t, 3, 0)
			return "redis {\n\t\t\taddress " + strings.Join(c.Addrs(), " ") + "\n\t\t\tcluster\n\t\t\ttimeout 5s\n\t\t}"
		}},
	}
	for _, store := range stores {
		t.Run(store.name, func(t *testing.T) {
			up := startUpstream(t)
			name := "devices_" + store.name
			g := startGateway(t, deviceSite(name, store.line(t), up.addr()))
			const her, other = "dev-tokyo", "dev-other"
			for _, title := range []string{"A", "B", "C"} {
				expectStatus(t, g.send("/send", map[string]any{"title": title, "campaign": "spring", "units": 2},
					"X-Device: "+her, "X-TZ: Asia/Tokyo", "X-Tier: gold"), http.StatusOK)
			}
			expectStatus(t, g.send("/send", map[string]any{"title": "A", "campaign": "spring", "units": 1}, "X-Device: "+other), http.StatusOK)

			given := "&http.request.header.X-TZ=Asia/Tokyo&tier_day=10"
			const hers = "device_day()=3 same_title_hour(title=A)=1 same_title_hour(title=B)=1 same_title_hour(title=C)=1"
			if got := held(t, name, "device="+her+given).summary(); got != hers {
				t.Fatalf("before the reset, her records: %s\nwant %s", got, hers)
			}
			budget := func() int64 { return usageOf(t, name, "campaign=spring&json.units=1")["campaign_budget"].Used }
			inCampaign := func() int64 {
				return usageOf(t, name, "campaign=spring&device="+her+"&json.units=1")["campaign_device"].Used
			}
			if budget() != 7 || inCampaign() != 3 {
				t.Fatalf("before the reset: budget %d, her sends in the campaign %d; want 7 and 3", budget(), inCampaign())
			}

			// As the page does, from any view: DELETE her records with the
			// values given.
			a := g.consoleDo(http.MethodDelete, "/support/api/capsets/"+name+"/records?device="+her+given, true)
			expectStatus(t, a, http.StatusOK)
			var reset struct {
				Reset []struct {
					Rules  []string          `json:"rules"`
					Values map[string]string `json:"values"`
				} `json:"reset"`
			}
			if err := json.Unmarshal(a.body, &reset); err != nil || len(reset.Reset) != 4 {
				t.Errorf("the reset answered %s (%v); want 4 logs: her day and three titles", a.body, err)
			}

			for _, q := range []string{"device=" + her + given, "device=" + her} {
				h := held(t, name, q)
				if got := h.summary(); got != "" {
					t.Errorf("after the reset, records?%s still lists %s", q, got)
				}
				if len(h.Unmatched) != 0 {
					t.Errorf("after the reset, records?%s lists unmatched logs %s", q, h.Unmatched)
				}
			}
			if budget() != 7 || inCampaign() != 3 {
				t.Errorf("the reset touched what is kept under the campaign: budget %d, her sends in it %d; want 7 and 3", budget(), inCampaign())
			}
			if every := usageOf(t, name, "device="+other)["every_send_day"].Used; every != 4 {
				t.Errorf("the reset touched the count of every send: %d, want 4", every)
			}
			if got := held(t, name, "device="+other).summary(); got != "device_day()=1 same_title_hour(title=A)=1" {
				t.Errorf("the other device: %s", got)
			}
			expectStatus(t, g.send("/send", map[string]any{"title": "A", "campaign": "spring", "units": 0},
				"X-Device: "+her, "X-TZ: Asia/Tokyo", "X-Tier: gold"), http.StatusOK)
		})
	}
}

// TestConsoleBrowserReset proves, in headless Chromium, the issue as a new
// user met it: a device counted in its X-TZ zone and held to its tier's
// limit. Looked up by the device alone, each rule that reads them says
// what it assumed (the fallback zone, the fallback limit); given them, the
// page still shows everything held about the device (the per-title logs
// too), counted in Tokyo with gold's limit. From the view of the device
// and its campaign, Reset lists exactly the logs that hold something
// (her day, one a title: no quiet rule, no zone line) and names the
// campaign's logs as left alone; confirmed, it forgets all of hers, and
// records then lists nothing of hers while the campaign's are intact.
func TestConsoleBrowserReset(t *testing.T) {
	b := startBrowser(t)
	up := startUpstream(t)
	const name = "devices_browser"
	g := startGateway(t, deviceSite(name, "", up.addr()))
	const her = "dev-tokyo"
	for _, title := range []string{"A", "B", "C"} {
		expectStatus(t, g.send("/send", map[string]any{"title": title, "campaign": "spring", "units": 2},
			"X-Device: "+her, "X-TZ: Asia/Tokyo", "X-Tier: gold"), http.StatusOK)
	}
	const sec = `section[data-capset="` + name + `"] `
	day := sec + `.rule[data-rule="device_day"]`
	b.do(t, "looking up the device alone",
		chromedp.Navigate(g.url+"/support/"),
		chromedp.WaitVisible(sec+`input[name="device"]`),
		chromedp.SendKeys(sec+`input[name="device"]`, her),
		chromedp.Click(sec+`button[type="submit"]`),
		chromedp.WaitVisible(day+`[data-used="3"]`),
	)
	labels := read(t, b, "the input labels", chromedp.Evaluate[[]string](`[...document.querySelectorAll('`+sec+`label.input')].map(e => e.firstChild.textContent)`))
	if strings.Join(labels, "; ") != "zone · header X-TZ; limit · tier_day; cost · JSON units" {
		t.Errorf("the inputs are labelled %q", labels)
	}
	rules := read(t, b, "the rules listed", chromedp.Evaluate[[]string](`[...document.querySelectorAll('`+sec+`.ruleset li')].map(e => e.textContent)`))
	if len(rules) != 6 || rules[0] != "device_day (device): tier_day (else 3) per calendar day (UTC) · zone from header X-TZ (else the one shown)" || rules[3] != "campaign_budget (campaign): 100 per 24 h · cost from JSON units" {
		t.Errorf("the rules are listed as %q", rules)
	}
	if text := read(t, b, "the page", chromedp.Evaluate[string](`document.querySelector('`+sec+`').textContent`)); strings.ContainsAny(text, "{}") {
		t.Errorf("the page shows a placeholder as written: %q", text)
	}
	assumed := read(t, b, "the assumptions", chromedp.Evaluate[[]string](`[...document.querySelectorAll('`+day+` .assumed li')].map(e => e.textContent)`))
	if strings.Join(assumed, "; ") != "Assumed: counted in UTC, the fallback zone: header X-TZ not given; Assumed: limit 3, the fallback: tier_day not given" {
		t.Errorf("without a zone and a tier, device_day says %q", assumed)
	}

	b.do(t, "giving the zone and the tier",
		chromedp.SendKeys(sec+`input[name="http.request.header.X-TZ"]`, "Asia/Tokyo"),
		chromedp.SendKeys(sec+`input[name="tier_day"]`, "10"),
		chromedp.Click(sec+`button[type="submit"]`),
		chromedp.WaitVisible(day+`[data-limit="10"]`),
	)
	heading := read(t, b, "the heading", chromedp.Text(sec+`.for`))
	titles := read(t, b, "the title logs", chromedp.Evaluate[int](`document.querySelectorAll('`+sec+`.rule[data-rule="same_title_hour"]').length`))
	meta := read(t, b, "device_day", chromedp.Text(day+` .rule-meta`))
	left := read(t, b, "assumptions left", chromedp.Evaluate[int](`document.querySelectorAll('`+day+` .assumed li').length`))
	if heading != "Everything held about device = "+her || titles != 3 || !strings.HasSuffix(meta, "10 per calendar day (Asia/Tokyo)") || left != 0 {
		t.Errorf("given the zone and tier: heading %q, %d title logs, device_day %q with %d assumptions; want everything held, 3, Tokyo's day at 10, none", heading, titles, meta, left)
	}

	b.do(t, "looking up the device in its campaign, and asking to reset",
		chromedp.SendKeys(sec+`input[name="campaign"]`, "spring"),
		chromedp.Click(sec+`button[type="submit"]`),
		chromedp.WaitVisible(sec+`.rule[data-rule="campaign_device"][data-used="3"]`),
		chromedp.Click(sec+`button.reset`),
		chromedp.WaitVisible(sec+`button.confirm-yes`),
	)
	forget := read(t, b, "the logs to forget", chromedp.Evaluate[[]string](`[...document.querySelectorAll('`+sec+`.confirm .forget li')].map(e => e.textContent)`))
	want := "device_day: 3 used; same_title_hour (title = A): 1 used; same_title_hour (title = B): 1 used; same_title_hour (title = C): 1 used"
	if strings.Join(forget, "; ") != want {
		t.Errorf("the confirmation lists %q\nwant %q", forget, want)
	}
	kept := read(t, b, "the logs kept", chromedp.Evaluate[[]string](`[...document.querySelectorAll('`+sec+`.confirm .kept li')].map(e => e.textContent)`))
	if strings.Join(kept, "; ") != "campaign_budget (campaign = spring); campaign_device (campaign = spring, device = "+her+"); every_send_day (every send)" {
		t.Errorf("the confirmation keeps %q", kept)
	}
	confirm := read(t, b, "the confirmation", chromedp.Text(sec+`.confirm`))
	for _, not := range []string{"night", "zone =", "X-TZ", "Asia/Tokyo"} {
		if strings.Contains(confirm, not) {
			t.Errorf("the confirmation mentions %q: %q", not, confirm)
		}
	}
	// At a phone's width, with the confirmation open, no two labels
	// cover each other.
	b.do(t, "narrowing the page to 390 px", chromedp.EmulateViewport(390, 900), chromedp.Sleep(200*time.Millisecond))
	if overlaps := read(t, b, "overlapping labels", chromedp.Evaluate[[]string](overlappingLabels)); len(overlaps) > 0 {
		t.Errorf("at 390 px these labels overlap: %q", overlaps)
	}
	if os.Getenv("FREQCAP_SCREENSHOTS") != "" {
		shot := read(t, b, "a screenshot", chromedp.FullScreenshot(100))
		if err := os.WriteFile(filepath.Join(os.Getenv("FREQCAP_SCREENSHOTS"), "console-reset-390px.png"), shot, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	b.do(t, "confirming the reset",
		chromedp.Click(sec+`button.confirm-yes`),
		chromedp.WaitVisible(sec+`.status.done`),
	)
	if got := held(t, name, "device="+her).summary(); got != "" {
		t.Errorf("after the reset, records lists %s", got)
	}
	if u := usageOf(t, name, "campaign=spring&device="+her+"&json.units=1"); u["campaign_budget"].Used != 6 || u["campaign_device"].Used != 3 {
		t.Errorf("the reset touched the campaign's logs: %+v", u)
	}
	b.expectQuiet(t)
}

// TestRecordsBesideAGlobalCeiling proves that a rule without by (one count
// over every send) neither stops records from listing one recipient nor
// is forgotten with her: its log is everyone's.
func TestRecordsBesideAGlobalCeiling(t *testing.T) {
	up := startUpstream(t)
	const name = "records_ceiling"
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap {
		name %s
		key_prefix %s
		dimension recipient {json.to}
		rule recipient_minute {
			by     recipient
			limit  5
			window 1m
		}
		rule all_minute {
			limit  10
			window 1m
		}
	}
	reverse_proxy %s`, name, testPrefix(), up.addr()))
	for _, to := range []string{"alice", "alice", "bob"} {
		expectStatus(t, g.send("/", map[string]any{"to": to}), http.StatusOK)
	}
	if got := held(t, name, "recipient=alice").summary(); got != "recipient_minute()=2" {
		t.Errorf("alice's records: %q", got)
	}
	expectStatus(t, adminDo(t, http.MethodDelete, "/frequency_cap/"+name+"/records?recipient=alice"), http.StatusOK)
	if got := held(t, name, "recipient=alice").summary(); got != "" {
		t.Errorf("after the reset, alice's records: %q", got)
	}
	if u := usageOf(t, name, "recipient=bob"); u["all_minute"].Used != 3 || u["recipient_minute"].Used != 1 {
		t.Errorf("the reset of alice touched what is not hers: %+v", u)
	}
}
