package caddymodule_test

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"
)

// TestAdminReadsValuesAsTheGatewayDoes proves that the admin API looks a
// value up as the gateway counts it where a reader rewrites what it reads:
// an address of an {email.*} dimension in any case finds (and resets) the
// mailbox's records, a topic of an {fcm_topic.*} dimension with FCM's
// /topics/ prefix finds the topic's (and "*" what conditions reach
// outside their topics), and a value the reader refuses is a 400, not a
// clear recipient.
func TestAdminReadsValuesAsTheGatewayDoes(t *testing.T) {
	up := startUpstream(t)
	mail := "mail_" + strings.ReplaceAll(testPrefix(), ":", "")
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap /mail {
		name %s
		key_prefix %s
		dimension email {email.personalizations.*.to.*.email}
		rule day {
			by     email
			limit  2
			window 24h
		}
	}
	frequency_cap /fcm {
		name %s_fcm
		key_prefix %s
		dimension topic {fcm_topic.message.topic} {fcm_topics.message.condition}
		rule hour {
			by     topic
			limit  2
			window 1h
		}
	}
	reverse_proxy %s`, mail, testPrefix(), mail, testPrefix(), up.addr()))
	ann := unique("Ann") + "@Example.com"
	for range 3 {
		g.post("/mail", "application/json", fmt.Sprintf(`{"personalizations":[{"to":[{"email":%q}]}]}`, ann))
	}
	for _, given := range []string{ann, strings.ToLower(ann), "%20" + strings.ToUpper(ann)} { // '+' is a plus here
		u := usageOf(t, mail, "email="+given)
		if u["day"].Used != 2 || u["day"].Remaining != 0 {
			t.Errorf("usage of %q: used %d, remaining %d; want 2 and 0, as the gateway counts the mailbox", given, u["day"].Used, u["day"].Remaining)
		}
	}
	a := adminDo(t, http.MethodGet, "/frequency_cap/"+mail+"/usage?email=nobody")
	expectStatus(t, a, http.StatusBadRequest)

	expectStatus(t, adminDo(t, http.MethodDelete, "/frequency_cap/"+mail+"/usage?email="+url.QueryEscape(ann)), http.StatusOK)
	expectStatus(t, g.post("/mail", "application/json", fmt.Sprintf(`{"personalizations":[{"to":[{"email":%q}]}]}`, strings.ToLower(ann))), http.StatusOK)

	news := unique("news")
	for range 2 {
		g.post("/fcm", "application/json", fmt.Sprintf(`{"message":{"topic":%q}}`, news))
	}
	if u := usageOf(t, mail+"_fcm", "topic="+url.QueryEscape("/topics/"+news)); u["hour"].Used != 2 {
		t.Errorf("usage of /topics/%s: used %d, want 2 (the topic %s)", news, u["hour"].Used, news)
	}
	if a := adminDo(t, http.MethodGet, "/frequency_cap/"+mail+"_fcm/usage?topic="+url.QueryEscape("no spaces")); a.status != http.StatusBadRequest {
		t.Errorf("a topic FCM refuses: status %d %s, want 400", a.status, a.body)
	}
	// What a condition reaches outside its topics counts as "*", which
	// is no topic name: it is looked up and reset all the same (it was
	// refused as no topic name).
	g.post("/fcm", "application/json", fmt.Sprintf(`{"message":{"condition":"!('%s' in topics)"}}`, unique("ghost")))
	if u := usageOf(t, mail+"_fcm", "topic=*"); u["hour"].Used != 1 {
		t.Errorf("usage of the topic *: used %d, want 1", u["hour"].Used)
	}
	expectStatus(t, adminDo(t, http.MethodDelete, "/frequency_cap/"+mail+"_fcm/usage?topic=*"), http.StatusOK)

	// Tokens beside topics (the gorush example): /topics/ comes off, as
	// gorush's topic is counted.
	up2 := startGorush(t)
	g2 := startExample(t, "../examples/gorush-gateway/Caddyfile", up2)
	deals := unique("deals")
	g2.post("/api/push", "application/json", fmt.Sprintf(`{"notifications":[{"platform":2,"topic":%q,"message":"m"}]}`, deals))
	if u := usageOf(t, "gorush", "token="+url.QueryEscape("/topics/"+deals)); u["token_minute"].Used != 1 {
		t.Errorf("the gorush example's usage of /topics/%s: used %d, want 1", deals, u["token_minute"].Used)
	}
	// A NUL inside a value: the gateway refuses such a send, and so does
	// the admin API (it answered 200, as for a recipient never sent to).
	if a := adminDo(t, http.MethodGet, "/frequency_cap/gorush/usage?token=a%00b"); a.status != http.StatusBadRequest || !strings.Contains(string(a.body), "NUL") {
		t.Errorf("a value with a NUL: %d %s, want 400 naming the NUL", a.status, a.body)
	}
}

// TestResetNamesWhatItLeftAlone proves that a reset by recipient names the
// rules that count her too but need another value (the same content
// twice), which it did not reset, so support is not told she is clear
// while those still refuse her; a reset that gives that value names none.
func TestResetNamesWhatItLeftAlone(t *testing.T) {
	up := startUpstream(t)
	name := "untouched_" + strings.ReplaceAll(testPrefix(), ":", "")
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap {
		name %s
		key_prefix %s
		dimension recipient {json.to}
		dimension content {json.body}
		rule day {
			by     recipient
			limit  5
			window 24h
		}
		rule same_content {
			by     recipient content
			limit  1
			window 1h
		}
	}
	reverse_proxy %s`, name, testPrefix(), up.addr()))
	zoe := unique("zoe")
	g.send("/", map[string]any{"to": zoe, "body": "hi"})
	r := resetUsage(t, name, "recipient="+zoe)
	if fmt.Sprint(r.Reset) != "[day]" || len(r.Untouched) != 1 || r.Untouched[0].Rule != "same_content" || fmt.Sprint(r.Untouched[0].Needs) != "[content]" {
		t.Errorf("a reset by recipient: %+v; want day reset, same_content untouched for want of content", r)
	}
	expectStatus(t, g.send("/", map[string]any{"to": zoe, "body": "hi"}), http.StatusTooManyRequests)
	r = resetUsage(t, name, "recipient="+zoe+"&content=hi")
	if len(r.Untouched) != 0 {
		t.Errorf("a reset naming every value: untouched %+v", r.Untouched)
	}
	expectStatus(t, g.send("/", map[string]any{"to": zoe, "body": "hi"}), http.StatusOK)
}
