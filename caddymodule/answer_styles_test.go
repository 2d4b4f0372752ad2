package caddymodule_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestAnswerStylesThroughCaddy proves that answer <style> reaches every
// answer the handler writes itself: a denial is the provider's
// rate-limit error with Retry-After, and a 400 about the body is the
// provider's request error, not the gateway's own {"error": ...}. (The
// shapes member by member are internal/answer's tests; the providers'
// SDKs reading them are conformance/'s.)
func TestAnswerStylesThroughCaddy(t *testing.T) {
	up := startUpstream(t)
	var sites strings.Builder
	styles := map[string]struct{ denial, badJSON string }{
		"apns":     {`{"reason":"TooManyRequests"}`, `"reason":"BadRequest"`},
		"fcm":      {`"errorCode":"QUOTA_EXCEEDED"`, `"status":"INVALID_ARGUMENT"`},
		"sendgrid": {`{"errors":[{"field":null,`, `{"errors":[{"field":null,"message":"request body is not valid JSON`},
		"twilio":   {`{"code":20429,`, `{"code":20422,`},
		"webpush":  {`{"code":429,"error":"Too Many Requests"`, `{"code":400,"error":"Bad Request"`},
		"expo":     {`{"data":{"status":"error"`, `{"errors":[{"code":"VALIDATION_ERROR"`},
		// Not a batch: no token to log, so gorush's error shape (a
		// batch is TestAnswerGorush's).
		"gorush": {`{"code":429,"message":"rule minute allows 1 per 1m0s`, `{"code":400,"message":"request body is not valid JSON`},
	}
	for style := range styles {
		fmt.Fprintf(&sites, `
	frequency_cap /%s {
		key_prefix %s
		answer %s
		dimension recipient {json.to}
		rule minute {
			by     recipient
			limit  1
			window 1m
		}
	}`, style, testPrefix(), style)
	}
	g := startGateway(t, sites.String()+"\n\treverse_proxy "+up.addr())
	for style, want := range styles {
		expectStatus(t, g.send("/"+style, map[string]any{"to": "amy"}), http.StatusOK)
		a := g.send("/"+style, map[string]any{"to": "amy"}, "apns-id: 11111111-2222-4333-8444-555555555555")
		status := http.StatusTooManyRequests
		if style == "expo" {
			status = http.StatusOK // Expo's per-device limit is an error ticket
		}
		expectStatus(t, a, status)
		if !strings.Contains(string(a.body), want.denial) || a.header.Get("Retry-After") == "" {
			t.Errorf("%s denial: %s (Retry-After %q)", style, a.body, a.header.Get("Retry-After"))
		}
		if style == "apns" && a.header.Get("apns-id") != "11111111-2222-4333-8444-555555555555" {
			t.Errorf("apns denial apns-id %q, want the request's", a.header.Get("apns-id"))
		}
		a = g.post("/"+style, "application/json", `{"to":`)
		expectStatus(t, a, http.StatusBadRequest)
		if !strings.Contains(string(a.body), want.badJSON) {
			t.Errorf("%s 400: %s", style, a.body)
		}
	}
	if up.count() != len(styles) {
		t.Errorf("upstream got %d sends, want %d (one a style; the capped expo one never reaches it)", up.count(), len(styles))
	}
}

// expoTickets reads an Expo answer's tickets (data as an array).
func expoTickets(t *testing.T, a *answer) []map[string]any {
	t.Helper()
	var v struct {
		Data   []map[string]any `json:"data"`
		Errors any              `json:"errors"`
	}
	if err := json.Unmarshal(a.body, &v); err != nil || v.Errors != nil {
		t.Fatalf("not Expo tickets: %s (%v)", a.body, err)
	}
	return v.Data
}

// ticketErrors lists, per ticket, "ok" or its details.error.
func ticketErrors(tickets []map[string]any) []string {
	out := make([]string, len(tickets))
	for i, tk := range tickets {
		out[i] = "ok"
		if d, ok := tk["details"].(map[string]any); ok {
			out[i] = fmt.Sprint(d["error"])
		}
	}
	return out
}

// TestAnswerExpo proves that with answer expo a request whose every
// recipient is capped gets one MessageRateExceeded ticket per recipient in
// a 200 without reaching Expo, a partly capped one gets Expo's answer with
// those tickets spliced in (answer expo under batch drop splices), and
// both of Expo's forms (an array of messages, one message as an object)
// are capped alike. Under batch reject every recipient of a refused batch
// gets an error ticket and nothing is recorded.
func TestAnswerExpo(t *testing.T) {
	up := startExpo(t)
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap /drop {
		key_prefix %s
		answer expo
		batch drop
		dimension recipient {json.*.to}
		rule minute {
			by     recipient
			limit  1
			window 1m
		}
	}
	frequency_cap /reject {
		key_prefix %s
		answer expo
		dimension recipient {json.*.to}
		rule minute {
			by     recipient
			limit  1
			window 1m
		}
	}
	reverse_proxy %s`, testPrefix(), testPrefix(), up.addr()))

	expectStatus(t, g.post("/drop", "application/json", `[{"to":"a"},{"to":["b","c"]}]`), http.StatusOK)
	sent := len(up.received())
	a := g.post("/drop", "application/json", `[{"to":"a"},{"to":["b","c"]}]`)
	expectStatus(t, a, http.StatusOK)
	if got := ticketErrors(expoTickets(t, a)); fmt.Sprint(got) != "[MessageRateExceeded MessageRateExceeded MessageRateExceeded]" {
		t.Errorf("all capped: tickets %v", got)
	}
	if len(up.received()) != sent {
		t.Errorf("an all-capped request reached Expo")
	}
	a = g.post("/drop", "application/json", `[{"to":["a","d"]},{"to":"b"}]`)
	expectStatus(t, a, http.StatusOK)
	if got := ticketErrors(expoTickets(t, a)); fmt.Sprint(got) != "[MessageRateExceeded ok MessageRateExceeded]" {
		t.Errorf("partly capped: tickets %v", got)
	}

	// One message as an object: capped alike, answered with one ticket.
	expectStatus(t, g.post("/drop", "application/json", `{"to":"e","body":"x"}`), http.StatusOK)
	if last := up.received()[len(up.received())-1]; string(last) != `{"to":"e","body":"x"}` {
		t.Errorf("Expo got %s for an object", last)
	}
	a = g.post("/drop", "application/json", `{"to":"e","body":"x"}`)
	expectStatus(t, a, http.StatusOK)
	if !strings.HasPrefix(string(a.body), `{"data":{"status":"error"`) {
		t.Errorf("a capped object: %s", a.body)
	}
	// An object whose to is an array of one gets an array, as from
	// Expo: only a to that is one token gets one ticket object.
	expectStatus(t, g.post("/drop", "application/json", `{"to":["g"],"body":"x"}`), http.StatusOK)
	a = g.post("/drop", "application/json", `{"to":["g"],"body":"x"}`)
	expectStatus(t, a, http.StatusOK)
	if !strings.HasPrefix(string(a.body), `{"data":[{"status":"error"`) {
		t.Errorf("a capped object whose to is an array of one: %s", a.body)
	}
	a = g.post("/drop", "application/json", `{"to":["e","f"],"body":"x"}`)
	expectStatus(t, a, http.StatusOK)
	if last := up.received()[len(up.received())-1]; string(last) != `{"to":["f"],"body":"x"}` {
		t.Errorf("Expo got %s for an object with one capped recipient", last)
	}
	if d := a.header.Get("Frequency-Cap-Dropped"); d != `"to.0"` {
		t.Errorf("Frequency-Cap-Dropped %q, want the path as the sender wrote it", d)
	}

	// batch reject: x is capped, so y is refused with it and not counted.
	expectStatus(t, g.post("/reject", "application/json", `[{"to":"x"}]`), http.StatusOK)
	a = g.post("/reject", "application/json", `[{"to":"x"},{"to":"y"}]`)
	expectStatus(t, a, http.StatusOK)
	if got := ticketErrors(expoTickets(t, a)); fmt.Sprint(got) != "[MessageRateExceeded MessageRateExceeded]" {
		t.Errorf("refused batch: tickets %v", got)
	}
	a = g.post("/reject", "application/json", `[{"to":"y"}]`)
	if got := ticketErrors(expoTickets(t, a)); fmt.Sprint(got) != "[ok]" {
		t.Errorf("y after a refused batch: %v", got)
	}
}

// TestSpliceExpoAllCapped proves that splice expo alone (answer problem)
// answers an all-capped batch with tickets too, without Expo: it is the
// positional answer the sender's SDK expects, where a 429 would make
// expo-server-sdk retry the batch and throw.
func TestSpliceExpoAllCapped(t *testing.T) {
	up := startExpo(t)
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap {
		key_prefix %s
		batch drop
		splice expo
		dimension recipient {json.*.to}
		rule minute {
			by     recipient
			limit  1
			window 1m
		}
	}
	reverse_proxy %s`, testPrefix(), up.addr()))
	expectStatus(t, g.post("/", "application/json", `[{"to":"a"}]`), http.StatusOK)
	a := g.post("/", "application/json", `[{"to":"a"}]`)
	expectStatus(t, a, http.StatusOK)
	if got := ticketErrors(expoTickets(t, a)); fmt.Sprint(got) != "[MessageRateExceeded]" || len(up.received()) != 1 {
		t.Errorf("tickets %v, Expo called %d times", got, len(up.received()))
	}
	// A 400 stays the problem style's.
	expectFailure(t, g.post("/", "application/json", `{"to":`), http.StatusBadRequest, "not valid JSON")
}

// TestBodyShapeErrors proves that a body whose shape is not the one the
// batch path expects is a 400 that says so, naming where.
func TestBodyShapeErrors(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap {
		key_prefix %s
		dimension recipient {json.notifications.*.tokens.*}
		rule minute {
			by     recipient
			limit  1
			window 1m
		}
	}
	reverse_proxy %s`, testPrefix(), up.addr()))
	expectFailure(t, g.post("/", "application/json", `{"notifications":{"tokens":["a"]}}`), http.StatusBadRequest,
		"the body is not of the shape dimension recipient expects ({json.notifications.*.tokens.*}): notifications is an object where * needs an array")
	expectFailure(t, g.post("/", "application/json", `{"notifications":[{"tokens":"a"}]}`), http.StatusBadRequest,
		"notifications.0.tokens is a string where * needs an array")
	expectFailure(t, g.post("/", "application/json", `{"notifications":[{"title":"no tokens"}]}`), http.StatusBadRequest,
		"missing value for dimension recipient at notifications.0.tokens.*")
}
