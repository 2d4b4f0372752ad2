package conformance_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/conformance"
)

// sendgridSite is the SendGrid gateway: every addressee of a mail (to,
// cc and bcc of every personalization) is capped on its own at 2 a
// minute, and a mail goes to all of its addressees or, when any is capped,
// to none (batch reject), refused with SendGrid's own 429.
const sendgridSite = `http://127.0.0.1:%d {
	frequency_cap ` + conformance.SendGridSendPath + ` {
		name mail
		batch reject
		answer sendgrid
		dimension recipient {email.personalizations.*.to.*.email} {email.personalizations.*.cc.*.email} {email.personalizations.*.bcc.*.email}
		rule recipient_minute {
			by recipient
			limit 2
			window 1m
		}
	}
	reverse_proxy %s
}
`

type sendgridResult struct {
	StatusCode int `json:"statusCode"`
	Error      *struct {
		Name string `json:"name"`
		Code *int   `json:"code"`
		Body *struct {
			Errors []struct {
				Message string  `json:"message"`
				Field   *string `json:"field"`
			} `json:"errors"`
		} `json:"body"`
		Headers map[string]string `json:"headers"`
		Text    string            `json:"text"`
	} `json:"error"`
	Ms   int           `json:"ms"`
	Wire []wireRequest `json:"wire"`
}

// TestSendGridSDK proves, with @sendgrid/mail's send pointed at the gateway
// (setDefaultRequest('baseUrl') on the client given to setClient), that a
// mail with several personalizations goes through (202) while every
// addressee is under the cap, and that a mail with one capped addressee
// rejects with the SDK's ResponseError whose code is 429, carrying
// SendGrid's error body ({"errors": [{"field": null, "message"}]}) and
// X-RateLimit-Limit / Remaining: 0 / Reset (a Unix time), after one HTTP
// request. Nothing of the refused mail is recorded: its other addressees
// can afterwards be sent exactly what they had left, and the mock
// SendGrid never sees it. An addressee is capped as cc or bcc too: the
// SDK's own cc and bcc fields reach no capped addressee.
func TestSendGridSDK(t *testing.T) {
	conformance.RequireNode(t)
	mock := &conformance.SendGrid{}
	upstream := conformance.Serve(t, mock)
	port := conformance.FreePort(t)
	gw := conformance.StartGateway(t, fmt.Sprintf(sendgridSite, port, upstream))
	defer gw.Healthy(t)

	mail := func(subject string, personalizations ...[]string) map[string]any {
		var ps []map[string]any
		for _, to := range personalizations {
			var addrs []map[string]string
			for _, a := range to {
				addrs = append(addrs, map[string]string{"email": a})
			}
			ps = append(ps, map[string]any{"to": addrs})
		}
		return map[string]any{"msg": map[string]any{
			"personalizations": ps,
			"from":             "noreply@example.com",
			"subject":          subject,
			"text":             "hello",
		}}
	}
	// copied is a mail to one addressee with another in cc or bcc, as
	// the SDK takes them (it moves them into the personalization).
	copied := func(subject, to, field, other string) map[string]any {
		return map[string]any{"msg": map[string]any{
			"to":      to,
			field:     other,
			"from":    "noreply@example.com",
			"subject": subject,
			"text":    "hello",
		}}
	}
	a, b, c, d, e, f := "a@example.com", "b@example.com", "c@example.com", "d@example.com", "e@example.com", "f@example.com"
	steps := []struct {
		call   map[string]any
		capped bool
		what   string
	}{
		{mail("1", []string{a, b}, []string{c}), false, "a, b | c: all first"},
		{mail("2", []string{a}, []string{d}), false, "a (2nd) | d"},
		{mail("3", []string{a, b}, []string{d}), true, "a (3rd: capped), b, d: refused whole"},
		{mail("4", []string{b}, []string{d}), false, "b, d: their 2nd, as the refused mail counted nothing"},
		{mail("5", []string{b}), true, "b (3rd)"},
		{mail("6", []string{d}), true, "d (3rd)"},
		{mail("7", []string{c}), false, "c (2nd)"},
		{copied("8", e, "cc", d), true, "e, cc d (3rd): refused whole"},
		{copied("9", e, "bcc", c), true, "e, bcc c (3rd): refused whole"},
		{copied("10", e, "cc", f), false, "e (1st, as the refused mails counted nothing), cc f (1st)"},
	}
	var calls []map[string]any
	for _, s := range steps {
		calls = append(calls, s.call)
	}
	var out nodeOutput[sendgridResult]
	start := time.Now()
	conformance.RunNode(t, "sendgrid.mjs", nil, map[string]any{
		"baseUrl": fmt.Sprintf("http://127.0.0.1:%d/", port),
		"apiKey":  "SG.conformance-test-key",
		"calls":   calls,
	}, &out)
	t.Logf("%s %s on node %s: %d sends in %v", out.SDK, out.Version, out.Node, len(calls), time.Since(start).Round(time.Millisecond))
	if len(out.Results) != len(steps) {
		t.Fatalf("%d results for %d sends", len(out.Results), len(steps))
	}
	for i, s := range steps {
		r := out.Results[i]
		what := fmt.Sprintf("send %d (%s)", i+1, s.what)
		if !s.capped {
			oneRequest(t, what, r.Wire, 202)
			if r.Error != nil || r.StatusCode != 202 {
				t.Errorf("%s: got %s, want 202", what, jsonString(r))
			}
			continue
		}
		oneRequest(t, what, r.Wire, 429)
		e := r.Error
		if e == nil {
			t.Errorf("%s: resolved with %d, want a ResponseError", what, r.StatusCode)
			continue
		}
		if i == 2 {
			t.Logf("%s: %s", what, jsonString(e))
		}
		if e.Name != "ResponseError" || e.Code == nil || *e.Code != 429 {
			t.Errorf("%s: rejected with %s code %s, want ResponseError code 429", what, e.Name, statusString(e.Code))
		}
		// A refused mail is SendGrid's errors, one a capped addressee
		// with its path as the field.
		field := map[int]string{2: "personalizations.0.to.0.email", 4: "personalizations.0.to.0.email", 5: "personalizations.0.to.0.email",
			7: "personalizations.0.cc.0.email", 8: "personalizations.0.bcc.0.email"}[i]
		if e.Body == nil || len(e.Body.Errors) != 1 || !strings.Contains(e.Body.Errors[0].Message, "recipient_minute") || e.Body.Errors[0].Field == nil || *e.Body.Errors[0].Field != field {
			t.Errorf("%s: error body %s, want SendGrid's {\"errors\":[{\"field\":%q,\"message\":...}]}", what, jsonString(e.Body), field)
		}
		if e.Headers["x-ratelimit-limit"] != "2" || e.Headers["x-ratelimit-remaining"] != "0" {
			t.Errorf("%s: X-RateLimit-Limit %q, X-RateLimit-Remaining %q, want 2 and 0", what, e.Headers["x-ratelimit-limit"], e.Headers["x-ratelimit-remaining"])
		}
		now := time.Now().Unix()
		if reset, err := strconv.ParseInt(e.Headers["x-ratelimit-reset"], 10, 64); err != nil || reset < now-120 || reset > now+120 {
			t.Errorf("%s: X-RateLimit-Reset %q, want a Unix time within the minute (now %d)", what, e.Headers["x-ratelimit-reset"], now)
		}
	}
	want := [][]string{{a, b, c}, {a, d}, {b, d}, {c}, {e, f}}
	if got := mock.Mails(); jsonString(got) != jsonString(want) {
		t.Errorf("the mock SendGrid accepted %v, want %v", got, want)
	}
}
