package caddymodule_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testExpoPush: an Expo batch whose recipients are capped one by one with
// the seed config. A batch of a message to a and one to [b, c], all with
// the same body, passes whole twice; then a batch to a and to [b, d]
// finds a and b with that body twice in 59 s: both entries are dropped,
// the message that named only a goes, Expo gets [d] alone, and the sender
// still gets three tickets in order: two MessageRateExceeded errors, then
// d's ticket from Expo. Messages without a body (data-only, title-only)
// pass. A batch past max_batch is refused with 413 and never reaches Expo.
func testExpoPush(t *testing.T, path string) {
	up := startExpo(t)
	g := startExample(t, path, up)
	a, b, c, d := unique("ExponentPushToken[a]"), unique("ExponentPushToken[b]"), unique("ExponentPushToken[c]"), unique("ExponentPushToken[d]")
	const send = "/--/api/v2/push/send"
	for i := 0; i < 2; i++ {
		batch := fmt.Sprintf(`[{"to":%q,"body":"hi"},{"to":[%q,%q],"body":"hi"}]`, a, b, c)
		expectStatus(t, g.post(send, "application/json", batch), http.StatusOK)
	}
	third := g.post(send, "application/json", fmt.Sprintf(`[{"to":%q,"body":"hi"},{"to":[%q,%q],"body":"hi"}]`, a, b, d))
	expectStatus(t, third, http.StatusOK)
	if got := dropped(t, third); !slices.Equal(got, []string{"0.to", "1.to.0"}) {
		t.Errorf("dropped %v, want [0.to 1.to.0]", got)
	}
	bodies := up.received()
	if want := fmt.Sprintf(`[{"to":[%q],"body":"hi"}]`, d); string(bodies[len(bodies)-1]) != want {
		t.Errorf("Expo got %s, want %s", bodies[len(bodies)-1], want)
	}
	var answer struct {
		Data []struct {
			Status  string `json:"status"`
			ID      string `json:"id"`
			Details struct {
				Error string `json:"error"`
				Rule  string `json:"rule"`
			} `json:"details"`
		} `json:"data"`
	}
	if err := json.Unmarshal(third.body, &answer); err != nil || len(answer.Data) != 3 {
		t.Fatalf("the sender got %s (%v), want 3 tickets", third.body, err)
	}
	for i, tk := range answer.Data[:2] {
		if tk.Status != "error" || tk.Details.Error != "MessageRateExceeded" || tk.Details.Rule != "same_content_59s" {
			t.Errorf("ticket %d: %+v, want a MessageRateExceeded error by same_content_59s", i, tk)
		}
	}
	if tk := answer.Data[2]; tk.Status != "ok" || tk.ID != d {
		t.Errorf("ticket 2: %+v, want Expo's ticket for %s", tk, d)
	}

	// A data-only and a title-only message, which Expo takes, pass whole:
	// they have no body for the same-content rules.
	e, f := unique("ExponentPushToken[e]"), unique("ExponentPushToken[f]")
	noBody := fmt.Sprintf(`[{"to":%q,"data":{"refresh":true},"_contentAvailable":true},{"to":%q,"title":"only a title"}]`, e, f)
	expectStatus(t, g.post(send, "application/json", noBody), http.StatusOK)
	if bodies := up.received(); string(bodies[len(bodies)-1]) != noBody {
		t.Errorf("Expo got %s, want the messages without a body as sent", bodies[len(bodies)-1])
	}

	// Expo's 429 refuses the whole request, sending nothing, and its SDK
	// tries again: each try is given back (before, two tries spent the
	// same-content cap and the third was capped, never delivered).
	h := unique("ExponentPushToken[h]")
	for range 3 {
		expectStatus(t, g.post(send, "application/json", fmt.Sprintf(`[{"to":%q,"body":"retried"}]`, h), "X-Want-Status: 429"), http.StatusTooManyRequests)
	}
	before := len(up.received())
	if a := g.post(send, "application/json", fmt.Sprintf(`[{"to":%q,"body":"retried"}]`, h)); a.status != http.StatusOK || len(up.received()) != before+1 {
		t.Errorf("after three sends Expo refused with 429, the send was capped: %d %s", a.status, a.body)
	}

	// Expo takes ExpoPushToken[…] for ExponentPushToken[…]: one device,
	// one count (before, each prefix had caps of its own).
	id := unique("g")
	for i, to := range []string{"ExponentPushToken[" + id + "]", "ExpoPushToken[" + id + "]", "ExpoPushToken[" + id + "]"} {
		n := len(up.received())
		a := g.post(send, "application/json", fmt.Sprintf(`[{"to":%q,"body":"twice"}]`, to))
		expectStatus(t, a, http.StatusOK)
		if delivered := len(up.received()) > n; delivered != (i < 2) {
			t.Errorf("send %d, to %s: reached Expo %v (%s); want the third alone capped, the two prefixes one token", i+1, to, delivered, a.body)
		}
	}

	n := len(up.received())
	var big []map[string]string
	for i := 0; i < 101; i++ {
		big = append(big, map[string]string{"to": unique(fmt.Sprint("t", i)), "body": "x"})
	}
	body, _ := json.Marshal(big)
	expectStatus(t, g.post(send, "application/json", string(body)), http.StatusRequestEntityTooLarge)
	if len(up.received()) != n {
		t.Error("a batch past max_batch reached Expo")
	}
}

// testGorushGateway: every token of every notification is capped on its
// own, with the message of its own notification: the same batch again
// within 10 minutes repeats every (token, message) pair, so nothing is
// left and the answer is gorush's, from the gateway alone, with a
// failed-push log for each of the three entries (answer gorush); a new
// message to the same tokens passes, the tokens that already had it are
// cut from their notification, and gorush's answer reports them failed;
// the same text as a title or in an FCM notification is the same message.
func testGorushGateway(t *testing.T, path string) {
	up := startGorush(t)
	g := startExample(t, path, up)
	t1, t2 := unique("t1"), unique("t2")
	batch := fmt.Sprintf(`{"notifications":[{"tokens":[%q,%q],"platform":2,"message":"sale"},{"tokens":[%q],"platform":2,"message":"news"}]}`, t1, t2, t1)
	expectStatus(t, g.post("/api/push", "application/json", batch), http.StatusOK)
	again := g.post("/api/push", "application/json", batch)
	expectStatus(t, again, http.StatusOK)
	if got := gorushOf(t, again); got.Counts != 3 || !slices.Equal(cappedBy(got, "same_message_10m"), []string{t1, t2, t1}) {
		t.Errorf("a repeated batch: %s", again.body)
	}
	if n := len(up.received()); n != 1 {
		t.Errorf("gorush got %d requests, want 1", n)
	}
	mixed := fmt.Sprintf(`{"notifications":[{"tokens":[%q],"platform":2,"message":"sale"},{"tokens":[%q,%q],"platform":2,"message":"new"}]}`, t2, t1, t2)
	a := g.post("/api/push", "application/json", mixed)
	expectStatus(t, a, http.StatusOK)
	if got := dropped(t, a); !slices.Equal(got, []string{"notifications.0.tokens.0"}) {
		t.Errorf("dropped %v, want the repeat of sale to t2", got)
	}
	bodies := up.received()
	if want := fmt.Sprintf(`{"notifications":[{"tokens":[%q,%q],"platform":2,"message":"new"}]}`, t1, t2); string(bodies[len(bodies)-1]) != want {
		t.Errorf("gorush got %s, want %s", bodies[len(bodies)-1], want)
	}
	if got := gorushOf(t, a); got.Counts != 3 || !slices.Equal(cappedBy(got, "same_message_10m"), []string{t2}) {
		t.Errorf("gorush's answer with the repeat reported: %s", a.body)
	}
	// The same text is one message whichever field gorush passes it on
	// in: "sale" as the title, in an FCM notification or any override
	// of it, or in a Huawei notification, is a repeat.
	t3 := unique("t3")
	for i, n := range []string{`"message":"sale"`, `"title":"sale"`, `"notification":{"body":"sale"}`,
		`"android":{"notification":{"body":"sale"}}`, `"webpush":{"notification":{"body":"sale"}}`,
		`"apns":{"payload":{"aps":{"alert":"sale"}}}`, `"huawei_notification":{"body":"sale"}`} {
		a := g.post("/api/push", "application/json", fmt.Sprintf(`{"notifications":[{"tokens":[%q],"platform":2,%s}]}`, t3, n))
		want := []string{t3}
		if i == 0 {
			want = nil
		}
		if got := cappedBy(gorushOf(t, a), "same_message_10m"); !slices.Equal(got, want) {
			t.Errorf("%s: capped %v, want %v; %s", n, got, want, a.body)
		}
	}
	// An iOS token upper-cased is the same device (APNs reads its hex
	// either way): the repeat is capped.
	ios := strings.Repeat("0a1b2c3d", 7) + fmt.Sprintf("%08x", uint32(time.Now().UnixNano()))
	for i, tok := range []string{ios, strings.ToUpper(ios)} {
		a := g.post("/api/push", "application/json", fmt.Sprintf(`{"notifications":[{"tokens":[%q],"platform":1,"message":"ios sale"}]}`, tok))
		want := []string{tok}
		if i == 0 {
			want = nil
		}
		if got := cappedBy(gorushOf(t, a), "same_message_10m"); !slices.Equal(got, want) {
			t.Errorf("iOS token %s: capped %v, want %v; %s", tok, got, want, a.body)
		}
	}
}

// testSendgridMail (the test's upstream answers 200 where SendGrid
// answers 202): a mail goes to all its addressees or to none. A mail
// to ann and bob passes; the same subject to bob and cy is refused whole
// (bob had it this week), the 429 is SendGrid's errors with one naming
// bob's entry as its field and the rule, X-RateLimit-Reset a Unix time
// on it and on the admitted answer (as SendGrid writes it), and
// nothing is counted for cy, who then gets three mails of other subjects
// in the day and no fourth, neither as cc nor as bcc nor with her address
// in capitals or spaced. A mail without a
// top-level subject passes.
func testSendgridMail(t *testing.T, path string) {
	up := startUpstream(t)
	g := startExample(t, path, up)
	ann, bob, cy, dan := unique("ann")+"@example.com", unique("bob")+"@example.com", unique("cy")+"@example.com", unique("dan")+"@example.com"
	mail := func(subject string, to ...string) string {
		var tos []map[string]string
		for _, e := range to {
			tos = append(tos, map[string]string{"email": e})
		}
		b, _ := json.Marshal(map[string]any{
			"personalizations": []any{map[string]any{"to": tos}},
			"subject":          subject,
			"content":          []any{map[string]string{"type": "text/plain", "value": "hi"}},
		})
		return string(b)
	}
	start := time.Now().Unix()
	admitted := g.post("/v3/mail/send", "application/json", mail("Welcome", ann, bob))
	expectStatus(t, admitted, http.StatusOK)
	refused := g.post("/v3/mail/send", "application/json", mail("Welcome", bob, cy))
	expectStatus(t, refused, http.StatusTooManyRequests)
	if e := sendgridErrorsOf(t, refused); len(e) != 1 || e[0].Field == nil || *e[0].Field != "personalizations.0.to.0.email" || !strings.Contains(e[0].Message, "same_subject_week") {
		t.Errorf("errors %s, want bob's entry by same_subject_week", refused.body)
	}
	for _, a := range []*answer{admitted, refused} {
		// same_subject_week frees up in a week: a Unix time, not 604800.
		if reset, _ := strconv.ParseInt(a.header.Get("X-RateLimit-Reset"), 10, 64); reset < start+604800 {
			t.Errorf("%d answer: X-RateLimit-Reset %q, want the Unix time a week on", a.status, a.header.Get("X-RateLimit-Reset"))
		}
	}
	if up.count() != 1 {
		t.Errorf("SendGrid got %d mails, want 1", up.count())
	}
	for i := 0; i < 3; i++ {
		expectStatus(t, g.post("/v3/mail/send", "application/json", mail(fmt.Sprint("news ", i), cy)), http.StatusOK)
	}
	expectStatus(t, g.post("/v3/mail/send", "application/json", mail("one more", cy)), http.StatusTooManyRequests)

	// cy has had her three mails today: SendGrid would deliver to her as
	// cc or bcc too, so either is refused, naming her entry there.
	for _, field := range []string{"cc", "bcc"} {
		b, _ := json.Marshal(map[string]any{
			"personalizations": []any{map[string]any{"to": []any{map[string]string{"email": dan}}, field: []any{map[string]string{"email": cy}}}},
			"subject":          "copied " + field,
			"content":          []any{map[string]string{"type": "text/plain", "value": "hi"}},
		})
		a := g.post("/v3/mail/send", "application/json", string(b))
		expectStatus(t, a, http.StatusTooManyRequests)
		if e := sendgridErrorsOf(t, a); len(e) != 1 || e[0].Field == nil || *e[0].Field != "personalizations.0."+field+".0.email" || !strings.Contains(e[0].Message, "recipient_day") {
			t.Errorf("%s: errors %s, want cy's entry by recipient_day", field, a.body)
		}
	}
	// Her address respelt in case or with white space is her mailbox; so
	// is it with a display name, or in a list (a mail API that reads RFC
	// 5322 addresses delivers both to her; before, each was a mailbox of
	// its own).
	for _, spelt := range []string{strings.ToUpper(cy), " " + cy + " ", "Cy <" + cy + ">", dan + ", " + cy} {
		a := g.post("/v3/mail/send", "application/json", mail("respelt", spelt))
		expectStatus(t, a, http.StatusTooManyRequests)
	}
	// A mail in sandbox mode is not delivered: it passes uncounted, to
	// cy too, who has had her three today.
	sandbox := fmt.Sprintf(`{"personalizations":[{"to":[{"email":%q}]}],"subject":"test","mail_settings":{"sandbox_mode":{"enable":true}},"content":[{"type":"text/plain","value":"hi"}]}`, cy)
	expectStatus(t, g.post("/v3/mail/send", "application/json", sandbox), http.StatusOK)
	// A text that is no address is refused, naming where it is.
	bad := g.post("/v3/mail/send", "application/json", mail("to no one", "nobody"))
	expectStatus(t, bad, http.StatusBadRequest)
	if !strings.Contains(string(bad.body), "personalizations.0.to.0.email") {
		t.Errorf("no address: %s, want the reason naming its path", bad.body)
	}
	// A mail without a top-level subject (a dynamic template; subjects
	// per personalization) passes, held to the daily cap alone.
	n := up.count()
	eve := unique("eve") + "@example.com"
	for _, body := range []string{
		fmt.Sprintf(`{"personalizations":[{"to":[{"email":%q}],"dynamic_template_data":{"name":"A"}}],"from":{"email":"n@example.com"},"template_id":"d-123"}`, eve),
		fmt.Sprintf(`{"personalizations":[{"to":[{"email":%q}],"subject":"per personalization"}],"from":{"email":"n@example.com"},"content":[{"type":"text/plain","value":"hi"}]}`, eve),
	} {
		expectStatus(t, g.post("/v3/mail/send", "application/json", body), http.StatusOK)
	}
	if got := up.count() - n; got != 2 {
		t.Errorf("SendGrid got %d of the 2 mails without a top-level subject", got)
	}
}

// sendgridErrorsOf decodes SendGrid's error body, {"errors": [...]}, as
// @sendgrid/mail reads it.
func sendgridErrorsOf(t *testing.T, a *answer) []struct {
	Field   *string `json:"field"`
	Message string  `json:"message"`
} {
	t.Helper()
	var body struct {
		Errors []struct {
			Field   *string `json:"field"`
			Message string  `json:"message"`
		} `json:"errors"`
	}
	if err := decodeStrict(a.body, &body); err != nil {
		t.Fatalf("not SendGrid's errors: %v: %s", err, a.body)
	}
	return body.Errors
}
