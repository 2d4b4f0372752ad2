package caddymodule_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"testing"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// records is the admin API's answer to GET .../records.
type records struct {
	Name      string `json:"name"`
	Dimension string `json:"dimension"`
	Value     string `json:"value"`
	Rules     []struct {
		ruleUsage
		Values map[string]string `json:"values"`
		Hashed []string          `json:"hashed"`
	} `json:"rules"`
	Elsewhere []struct {
		Rule    string   `json:"rule"`
		By      []string `json:"by"`
		KeyedBy string   `json:"keyed_by"`
	} `json:"elsewhere"`
}

func recordsOf(t *testing.T, name, query string) records {
	t.Helper()
	a := adminDo(t, http.MethodGet, "/frequency_cap/"+name+"/records?"+query)
	expectStatus(t, a, http.StatusOK)
	var r records
	if err := json.Unmarshal(a.body, &r); err != nil {
		t.Fatalf("records answer %s: %v", a.body, err)
	}
	return r
}

// summary lists a records answer as rule(values)=used, sorted.
func (r records) summary() string {
	var out []string
	for _, u := range r.Rules {
		var vs []string
		for k, v := range u.Values {
			if len(v) > 12 {
				v = v[:1] + "hash"
			}
			vs = append(vs, k+"="+v)
		}
		sort.Strings(vs)
		out = append(out, fmt.Sprintf("%s(%s)=%d", u.Rule, strings.Join(vs, ","), u.Used))
	}
	sort.Strings(out)
	return strings.Join(out, " ")
}

// Support can list and reset everything the gateway holds about one
// recipient, as staff type the number: GET .../records?recipient=+1555...
// lists every rule keyed by the recipient, once for each log held (her
// own counts, each content she was sent, a long one by its hash, her
// budget), with its timeline; it names the rule that another dimension
// keys (by campaign recipient) in "elsewhere"; DELETE forgets every log
// listed, counts one reset and leaves other recipients and the rule
// kept elsewhere alone; after it she can be sent to again. A query that
// names no keying dimension, or two, is a 400 that says which to give.
// Run on the memory store and on Redis.
func TestAdminRecords(t *testing.T) {
	for _, store := range []string{"memory", "redis"} {
		t.Run(store, func(t *testing.T) {
			storeLine := ""
			if store == "redis" {
				storeLine = "redis redis://" + redistest.Start(t).Addr + "/0"
			}
			up := startUpstream(t)
			name := "rec_" + store
			g := startGateway(t, fmt.Sprintf(`
	frequency_cap {
		name       %s
		key_prefix %s
		%s
		on_missing skip
		dimension recipient {json.to}
		dimension content   {json.body}
		dimension campaign  {json.campaign}
		rule recipient_minute {
			by     recipient
			limit  15
			window 1m
		}
		rule same_content {
			by     recipient content
			limit  1
			window 59s
		}
		rule budget {
			by     recipient
			limit  100
			window 1h
			cost   {json.amount}
		}
		rule campaign_day {
			by     campaign recipient
			limit  3
			window 24h
		}
		rule night {
			quiet 23:00-23:01
			by    recipient
		}
	}
	reverse_proxy %s`, name, testPrefix(), storeLine, up.addr()))
			long := strings.Repeat("Your code is 123456. ", 5)
			const phone, other = "+15550100", "+15550199"
			for _, m := range []map[string]any{
				{"to": phone, "body": "hi", "amount": 30, "campaign": "spring"},
				{"to": phone, "body": long, "amount": 20},
				{"to": phone, "body": "bye", "amount": 0},
				{"to": other, "body": "hi", "amount": 0},
			} {
				expectStatus(t, g.send("/", m), http.StatusOK)
			}
			expectStatus(t, g.send("/", map[string]any{"to": phone, "body": "hi", "amount": 0}), http.StatusTooManyRequests)

			r := recordsOf(t, name, "recipient="+phone)
			want := "budget()=50 night()=0 recipient_minute()=3 same_content(content=#hash)=1 same_content(content=bye)=1 same_content(content=hi)=1"
			if r.Dimension != "recipient" || r.Value != phone || r.summary() != want {
				t.Fatalf("records of %s: %s %s: %s\nwant %s", phone, r.Dimension, r.Value, r.summary(), want)
			}
			if len(r.Elsewhere) != 1 || r.Elsewhere[0].Rule != "campaign_day" || r.Elsewhere[0].KeyedBy != "campaign" {
				t.Errorf("elsewhere: %+v", r.Elsewhere)
			}
			hashed := 0
			for _, u := range r.Rules {
				if u.Rule == "recipient_minute" && len(u.Sends) != 3 {
					t.Errorf("recipient_minute's timeline: %+v", u.Sends)
				}
				if len(u.Hashed) > 0 {
					hashed++
					if u.Hashed[0] != "content" || !strings.HasPrefix(u.Values["content"], "#") {
						t.Errorf("a hashed log: %+v", u)
					}
				}
			}
			if hashed != 1 {
				t.Errorf("%d logs say they hold a hashed value, want 1 (the long body)", hashed)
			}
			// The hash shown, given back as the content with hashed
			// naming it, reads that log (it read none: "0 used" beside
			// a refused send); with as_sent, the text as sent, which
			// nobody sent; with neither it is a 400 saying to choose.
			for _, u := range r.Rules {
				if len(u.Hashed) == 0 {
					continue
				}
				q := url.Values{"recipient": {phone}, "content": {u.Values["content"]}, "hashed": {"content"}}
				if got := usageOf(t, name, q.Encode())["same_content"]; got.Used != 1 {
					t.Errorf("usage of the shown hash %s: %+v, want 1 used", u.Values["content"], got)
				}
				q.Del("hashed")
				expectStatus(t, adminDo(t, http.MethodGet, "/frequency_cap/"+name+"/usage?"+q.Encode()), http.StatusBadRequest)
				expectStatus(t, adminDo(t, http.MethodDelete, "/frequency_cap/"+name+"/usage?"+q.Encode()), http.StatusBadRequest)
				q.Set("as_sent", "content")
				if got := usageOf(t, name, q.Encode())["same_content"]; got.Used != 0 {
					t.Errorf("usage of the text %s: %+v, want 0 used", u.Values["content"], got)
				}
				q.Del("as_sent")
				q.Set("hashed", "recipient")
				expectStatus(t, adminDo(t, http.MethodGet, "/frequency_cap/"+name+"/usage?"+q.Encode()), http.StatusBadRequest)
			}
			expectStatus(t, adminDo(t, http.MethodGet, "/frequency_cap/"+name+"/records?recipient="+url.QueryEscape(phone)+"&hashed=recipient"), http.StatusBadRequest)

			// A sender may send a text shaped as a hash is shown: read
			// as sent (as_sent), usage names the log it is counted in,
			// and a reset of it lets the next send through (a probe:
			// usage said 0 used and a reset left the send refused).
			shaped := url.Values{"recipient": {"#0123456789abcdef0123456789abcdef"}, "content": {"#0123456789abcdef0123456789abcdef"}, "as_sent": {"recipient,content"}}
			shapedSend := map[string]any{"to": shaped.Get("recipient"), "body": shaped.Get("content"), "amount": 0}
			both := url.Values{"recipient": {"#0123456789abcdef0123456789abcdef"}, "content": {"x"}, "hashed": {"recipient"}, "as_sent": {"recipient"}}
			expectStatus(t, adminDo(t, http.MethodGet, "/frequency_cap/"+name+"/usage?"+both.Encode()), http.StatusBadRequest)
			expectStatus(t, g.send("/", shapedSend), http.StatusOK)
			expectStatus(t, g.send("/", shapedSend), http.StatusTooManyRequests)
			if got := usageOf(t, name, shaped.Encode()); got["same_content"].Used != 1 || got["recipient_minute"].Used != 1 {
				t.Errorf("usage of a hash-shaped text as sent: same_content %+v, recipient_minute %+v; want 1 used each (the refused send is not counted)", got["same_content"], got["recipient_minute"])
			}
			expectStatus(t, adminDo(t, http.MethodDelete, "/frequency_cap/"+name+"/usage?"+shaped.Encode()), http.StatusOK)
			expectStatus(t, g.send("/", shapedSend), http.StatusOK)

			a := adminDo(t, http.MethodDelete, "/frequency_cap/"+name+"/records?recipient="+phone)
			expectStatus(t, a, http.StatusOK)
			var reset struct {
				Reset []struct {
					Rules  []string          `json:"rules"`
					Values map[string]string `json:"values"`
				} `json:"reset"`
			}
			if err := json.Unmarshal(a.body, &reset); err != nil || len(reset.Reset) != 5 {
				t.Errorf("reset answer: %s (%v); want 5 logs: hers, the budget's, three contents", a.body, err)
			}
			if got := recordsOf(t, name, "recipient="+phone).summary(); got != "budget()=0 night()=0 recipient_minute()=0" {
				t.Errorf("after the reset: %s", got)
			}
			if got := recordsOf(t, name, "recipient="+other).summary(); got != "budget()=0 night()=0 recipient_minute()=1 same_content(content=hi)=1" {
				t.Errorf("the other recipient: %s", got)
			}
			if u := usageOf(t, name, "campaign=spring&recipient="+phone)["campaign_day"]; u.Used != 1 {
				t.Errorf("campaign_day, kept under the campaign, used %d: want it untouched", u.Used)
			}
			expectStatus(t, g.send("/", map[string]any{"to": phone, "body": "hi", "amount": 0}), http.StatusOK)

			for _, c := range []struct{ query, reason string }{
				{"content=hi", "no rule keys its records by content"},
				{"recipient=a&campaign=b", "give one dimension"},
				{"", "give one dimension"},
			} {
				a := adminDo(t, http.MethodGet, "/frequency_cap/"+name+"/records?"+c.query)
				expectStatus(t, a, http.StatusBadRequest)
				if !strings.Contains(string(a.body), c.reason) || !strings.Contains(string(a.body), "recipient") {
					t.Errorf("%q: %s; want %q and the keying dimensions", c.query, a.body, c.reason)
				}
			}
			if got := recordsOf(t, name, "campaign=spring"); len(got.Rules) != 1 || got.Rules[0].Values["recipient"] != phone {
				t.Errorf("records of a campaign: %s", got.summary())
			}
		})
	}
}

// What no rule of the cap set reads is still held about the recipient: a
// log of another cap set on the same key_prefix (or of a rule since
// removed) is listed in "unmatched" and forgotten by DELETE with the rest;
// and a rule whose cost placeholder is long enough to be hashed in the
// log's id is found and forgotten like any other.
func TestAdminRecordsUnmatchedAndLongCosts(t *testing.T) {
	up := startUpstream(t)
	prefix := testPrefix()
	const amount = "an_amount_whose_placeholder_is_longer_than_sixty_four_bytes_in_all"
	g := startGateway(t, fmt.Sprintf(`
	handle /a {
		frequency_cap {
			name       rec_a
			key_prefix %[1]s
			dimension recipient {json.to}
			dimension content   {json.body}
			rule per_content {
				by     recipient content
				limit  5
				window 1h
				cost   {json.%[2]s}
			}
		}
		reverse_proxy %[3]s
	}
	handle /b {
		frequency_cap {
			name       rec_b
			key_prefix %[1]s
			dimension recipient {json.to}
			dimension channel   {json.channel}
			rule per_channel {
				by     recipient channel
				limit  5
				window 1h
			}
		}
		reverse_proxy %[3]s
	}`, prefix, amount, up.addr()))
	expectStatus(t, g.send("/a", map[string]any{"to": "x", "body": "hi", amount: 2}), http.StatusOK)
	expectStatus(t, g.send("/b", map[string]any{"to": "x", "channel": "sms"}), http.StatusOK)

	a := adminDo(t, http.MethodGet, "/frequency_cap/rec_a/records?recipient=x")
	expectStatus(t, a, http.StatusOK)
	var got struct {
		Rules []struct {
			Rule   string            `json:"rule"`
			Used   int64             `json:"used"`
			Values map[string]string `json:"values"`
		} `json:"rules"`
		Unmatched []struct {
			Values  map[string]string `json:"values"`
			Records int               `json:"records"`
		} `json:"unmatched"`
	}
	if err := json.Unmarshal(a.body, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Rules) != 1 || got.Rules[0].Used != 2 || got.Rules[0].Values["content"] != "hi" {
		t.Errorf("the long-cost rule's log: %s", a.body)
	}
	if len(got.Unmatched) != 1 || got.Unmatched[0].Values["channel"] != "sms" || got.Unmatched[0].Records != 1 {
		t.Errorf("the other cap set's log: %s", a.body)
	}

	expectStatus(t, adminDo(t, http.MethodDelete, "/frequency_cap/rec_a/records?recipient=x"), http.StatusOK)
	if u := usageOf(t, "rec_a", "recipient=x&content=hi")["per_content"]; u.Used != 0 {
		t.Errorf("per_content used %d after the reset", u.Used)
	}
	if u := usageOf(t, "rec_b", "recipient=x&channel=sms")["per_channel"]; u.Used != 0 {
		t.Errorf("the unmatched log survived the reset: per_channel used %d", u.Used)
	}
	a = adminDo(t, http.MethodGet, "/frequency_cap/rec_a/records?recipient=x")
	if !strings.Contains(string(a.body), `"rules":[]`) || !strings.Contains(string(a.body), `"unmatched":[]`) {
		t.Errorf("after the reset: %s", a.body)
	}
}
