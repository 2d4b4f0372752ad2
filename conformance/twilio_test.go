package conformance_test

import (
	"fmt"
	"net/http"
	"net/url"
	"testing"

	"github.com/freqcap/caddy-freqcap/conformance"
)

// twilioSite is the SMS gateway: the To of each form-encoded Messages
// request is capped at 2 a minute, refused with Twilio's own 429.
const twilioSite = `http://127.0.0.1:%d {
	# Twilio creates a message at Messages, Messages.json and Messages.xml
	# alike (the extension picks the answer's format): all are capped.
	@messages path_regexp (?i)^/2010-04-01/Accounts/[^/]+/Messages(\.json|\.xml)?$
	frequency_cap @messages {
		name sms
		answer twilio
		dimension recipient {form.To}
		rule recipient_minute {
			by recipient
			limit 2
			window 1m
		}
	}
	reverse_proxy %s
}
`

type twilioResult struct {
	SID    string `json:"sid"`
	Status string `json:"status"`
	To     string `json:"to"`
	Error  *struct {
		Name          string `json:"name"`
		RestException bool   `json:"restException"`
		Message       string `json:"message"`
		Status        *int   `json:"status"`
		Code          *int   `json:"code"`
		MoreInfo      string `json:"moreInfo"`
	} `json:"error"`
	Ms   int           `json:"ms"`
	Wire []wireRequest `json:"wire"`
}

// TestTwilioSDK proves, with twilio's client.messages.create (To, From,
// Body, form-encoded to /2010-04-01/Accounts/{sid}/Messages.json) sent to
// the gateway through the library's RequestClient, that a send under the
// cap creates the message (the mock's 201 Message resource, status
// "queued"), and that a capped send throws the library's RestException
// with status 429, code 20429 and Twilio's more_info link, after one HTTP
// request (autoRetry is off by default). The mock Twilio gets exactly the
// admitted messages.
func TestTwilioSDK(t *testing.T) {
	conformance.RequireNode(t)
	mock := &conformance.Twilio{}
	upstream := conformance.Serve(t, mock)
	port := conformance.FreePort(t)
	gw := conformance.StartGateway(t, fmt.Sprintf(twilioSite, port, upstream))
	defer gw.Healthy(t)

	const alice, bob = "+15550000001", "+15550000002"
	send := func(to string, i int) map[string]string {
		return map[string]string{"to": to, "from": "+15559999999", "body": fmt.Sprintf("code %d", i)}
	}
	steps := []struct {
		to     string
		capped bool
	}{{alice, false}, {alice, false}, {alice, true}, {bob, false}, {alice, true}}
	var calls []any
	for i, s := range steps {
		calls = append(calls, send(s.to, i))
	}
	var out nodeOutput[twilioResult]
	conformance.RunNode(t, "twilio.mjs", nil, map[string]any{
		"origin":     fmt.Sprintf("http://127.0.0.1:%d", port),
		"accountSid": "AC0123456789abcdef0123456789abcdef",
		"authToken":  "conformance-token",
		"calls":      calls,
	}, &out)
	t.Logf("%s %s on node %s", out.SDK, out.Version, out.Node)
	if len(out.Results) != len(steps) {
		t.Fatalf("%d results for %d sends", len(out.Results), len(steps))
	}
	for i, s := range steps {
		r := out.Results[i]
		what := fmt.Sprintf("send %d (to %s)", i+1, s.to)
		if !s.capped {
			oneRequest(t, what, r.Wire, 201)
			if r.Error != nil || r.Status != "queued" || r.To != s.to || r.SID == "" {
				t.Errorf("%s: got %s, want the created message (status queued)", what, jsonString(r))
			}
			continue
		}
		oneRequest(t, what, r.Wire, 429)
		e := r.Error
		if e == nil {
			t.Errorf("%s: resolved with %s, want a RestException", what, jsonString(r))
			continue
		}
		if i == 2 {
			t.Logf("%s: %s", what, jsonString(e))
		}
		if !e.RestException || e.Name != "RestException" || e.Status == nil || *e.Status != 429 || e.Code == nil || *e.Code != 20429 {
			t.Errorf("%s: threw %s (instanceof RestException: %v) status %s code %s, want RestException status 429 code 20429 (message %q)",
				what, e.Name, e.RestException, statusString(e.Status), statusString(e.Code), e.Message)
		}
		if e.MoreInfo != "https://www.twilio.com/docs/errors/20429" {
			t.Errorf("%s: moreInfo %q, want https://www.twilio.com/docs/errors/20429", what, e.MoreInfo)
		}
	}
	// alice is at her cap: the spellings Twilio also creates a message at
	// are capped with Messages.json, not a way around it.
	for _, path := range []string{"Messages", "Messages.xml", "messages.JSON"} {
		u := fmt.Sprintf("http://127.0.0.1:%d/2010-04-01/Accounts/AC0123456789abcdef0123456789abcdef/%s", port, path)
		resp, err := http.PostForm(u, url.Values{"To": {alice}, "From": {"+15559999999"}, "Body": {"again"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests {
			t.Errorf("a send to alice at %s: %d, want 429: that spelling passes her cap", path, resp.StatusCode)
		}
	}
	if got := mock.Count(); got[alice] != 2 || got[bob] != 1 || len(got) != 2 {
		t.Errorf("the mock Twilio created %v, want %s: 2, %s: 1", got, alice, bob)
	}
}
