package conformance_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/freqcap/caddy-freqcap/conformance"
)

// expoSite is the Expo gateway: every recipient of a batch ({json.*.to}:
// "to" a token or an array of tokens) is capped on its own at 2 a minute;
// capped recipients are dropped from the body passed on, and Expo's answer
// gets an error ticket back at each one's place (splice expo); a request
// whose recipients are all capped is answered by the gateway itself with
// error tickets in a 200 (answer expo), as is every error it writes.
const expoSite = `http://127.0.0.1:%d {
	frequency_cap ` + conformance.ExpoSendPath + ` {
		name expo
		batch drop
		splice expo
		answer expo
		dimension recipient {device_token.*.to}
		rule recipient_minute {
			by recipient
			limit 2
			window 1m
		}
	}
	reverse_proxy %s
}
`

type expoTicket struct {
	Status  string         `json:"status"`
	ID      string         `json:"id"`
	Message string         `json:"message"`
	Details map[string]any `json:"details"`
}

type expoResult struct {
	Tickets []expoTicket `json:"tickets"`
	Error   *struct {
		Name       string `json:"name"`
		Message    string `json:"message"`
		StatusCode *int   `json:"statusCode"`
	} `json:"error"`
	// raw fetch
	Status int             `json:"status"`
	Body   json.RawMessage `json:"body"`

	Ms   int           `json:"ms"`
	Wire []wireRequest `json:"wire"`
}

func expoToken(name string) string { return "ExponentPushToken[" + name + "]" }

// TestExpoSDK proves, with expo-server-sdk's sendPushNotificationsAsync
// pointed at the gateway (EXPO_BASE_URL), that for plain batches (under
// 1 KB) and gzipped ones (over 1 KB, which the SDK compresses itself), with
// "to" arrays, partly or wholly capped, the call resolves (no exception)
// after exactly one HTTP request (no retry) with exactly one ticket per
// recipient sent, "to" arrays flattened, in order: the upstream's own
// ticket for each admitted recipient, {status:"error", details:{error:
// "MessageRateExceeded"}} for each capped one. The mock Expo receives only
// the admitted recipients, in order, in the Content-Encoding the SDK sent
// (it decodes gzip as exp.host does), and nothing at all for a wholly
// capped chunk. Then a single message sent as an object (Expo's API takes
// one; the SDK cannot send one, as it calls messages.reduce, so it is sent
// with fetch): it is capped too, and answered in the shape Expo answers an
// object, data being one ticket.
func TestExpoSDK(t *testing.T) {
	conformance.RequireNode(t)
	mock := &conformance.Expo{GzipResponses: true}
	upstream := conformance.Serve(t, mock)
	port := conformance.FreePort(t)
	gw := conformance.StartGateway(t, fmt.Sprintf(expoSite, port, upstream))
	defer gw.Healthy(t)
	env := []string{fmt.Sprintf("EXPO_BASE_URL=http://127.0.0.1:%d", port)}

	pad := strings.Repeat("x", 700)
	A, B, C, D, E, F, G := expoToken("alice"), expoToken("bob"), expoToken("carol"), expoToken("dave"), expoToken("erin"), expoToken("frank"), expoToken("grace")
	type msg = map[string]any
	steps := []struct {
		name     string
		messages []msg
		capped   []bool // per recipient, "to" arrays flattened
		gzip     bool   // the body is over 1 KB, so the SDK gzips it
	}{
		{"plain batch with a to array, all admitted",
			[]msg{{"to": A, "body": "m1"}, {"to": []string{B, C}, "body": "m2"}, {"to": A, "body": "m3"}},
			[]bool{false, false, false, false}, false},
		{"plain batch, partly capped",
			[]msg{{"to": A, "body": "m4"}, {"to": []string{B, D}, "body": "m5"}, {"to": E, "body": "m6"}},
			[]bool{true, false, false, false}, false},
		{"gzipped batch with a to array, partly capped",
			[]msg{{"to": []string{B, F, C}, "body": "m7", "data": msg{"pad": pad}}, {"to": G, "body": "m8", "data": msg{"pad": pad}}, {"to": D, "body": "m9"}},
			[]bool{true, false, false, false, false}, true},
		{"plain chunk, all capped",
			[]msg{{"to": A, "body": "m10"}, {"to": []string{B, C}, "body": "m11"}},
			[]bool{true, true, true}, false},
		{"gzipped chunk, all capped",
			[]msg{{"to": []string{A, B, C, D}, "body": "m12", "data": msg{"pad": pad}}, {"to": C, "body": "m13", "data": msg{"pad": pad}}},
			[]bool{true, true, true, true, true}, true},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			body, _ := json.Marshal(step.messages)
			if (len(body) > 1024) != step.gzip {
				t.Fatalf("test data: the body is %d bytes, gzip=%v", len(body), step.gzip)
			}
			var recipients []string
			for _, m := range step.messages {
				switch to := m["to"].(type) {
				case string:
					recipients = append(recipients, to)
				case []string:
					recipients = append(recipients, to...)
				}
			}
			var admitted []string
			for i, r := range recipients {
				if !step.capped[i] {
					admitted = append(admitted, r)
				}
			}

			before := len(mock.Calls())
			var out nodeOutput[expoResult]
			conformance.RunNode(t, "expo.mjs", env, map[string]any{"calls": []any{map[string]any{"sdk": step.messages}}}, &out)
			res := out.Results[0]
			calls := mock.Calls()[before:]

			wantEncoding := ""
			if step.gzip {
				wantEncoding = "gzip"
			}
			if len(res.Wire) > 0 {
				if got := deref(res.Wire[0].ContentEncoding); got != wantEncoding {
					t.Errorf("the SDK sent Content-Encoding %q, want %q", got, wantEncoding)
				}
			}
			oneRequest(t, "sendPushNotificationsAsync", res.Wire, 200)
			if res.Error != nil {
				t.Fatalf("sendPushNotificationsAsync threw %s: %s (after %d ms)", res.Error.Name, res.Error.Message, res.Ms)
			}
			if len(res.Tickets) != len(recipients) {
				t.Fatalf("got %d tickets for %d recipients: %s", len(res.Tickets), len(recipients), jsonString(res.Tickets))
			}

			// The upstream: one request with the admitted recipients, in
			// the encoding the SDK sent, or none when all were capped.
			var ids []string
			if len(admitted) == 0 {
				if len(calls) != 0 {
					t.Errorf("the upstream got %d requests for a wholly capped chunk, want none: recipients %v", len(calls), calls[0].Recipients)
				}
			} else if len(calls) != 1 {
				t.Errorf("the upstream got %d requests, want 1", len(calls))
			} else {
				c := calls[0]
				ids = c.Tickets
				if c.ContentEncoding() != wantEncoding {
					t.Errorf("the upstream got Content-Encoding %q, want %q (as the SDK sent it)", c.ContentEncoding(), wantEncoding)
				}
				if c.DecodeErr != nil {
					t.Errorf("the upstream could not decode the body: %v", c.DecodeErr)
				}
				if !equalStrings(c.Recipients, admitted) {
					t.Errorf("the upstream got recipients %v, want the admitted ones %v", c.Recipients, admitted)
				}
			}

			t.Logf("%d recipients, %d bytes (Content-Encoding %q), %d ms: tickets %s", len(recipients), len(body), wantEncoding, res.Ms, jsonString(res.Tickets))
			next := 0
			for i, tk := range res.Tickets {
				if step.capped[i] {
					if tk.Status != "error" || tk.Details["error"] != "MessageRateExceeded" || tk.Message == "" {
						t.Errorf("ticket %d (%s, capped) = %s, want status error, a message and details.error MessageRateExceeded", i, recipients[i], jsonString(tk))
					}
					continue
				}
				if tk.Status != "ok" {
					t.Errorf("ticket %d (%s, admitted) = %s, want status ok", i, recipients[i], jsonString(tk))
					continue
				}
				if next < len(ids) && tk.ID != ids[next] {
					t.Errorf("ticket %d (%s) has id %s, want the upstream's ticket %s for it (order kept)", i, recipients[i], tk.ID, ids[next])
				}
				next++
			}
		})
	}

	// The object form: {"to": token, ...}, sent with fetch.
	t.Run("single message object", func(t *testing.T) {
		H := expoToken("henry")
		for i, wantCapped := range []bool{false, false, true} {
			before := len(mock.Calls())
			var out nodeOutput[expoResult]
			single := map[string]any{"to": H, "body": fmt.Sprintf("single %d", i)}
			conformance.RunNode(t, "expo.mjs", env, map[string]any{"calls": []any{map[string]any{"raw": single}}}, &out)
			res := out.Results[0]
			calls := mock.Calls()[before:]
			oneRequest(t, fmt.Sprintf("send %d", i+1), res.Wire, 200)
			if res.Status != 200 {
				t.Errorf("send %d: status %d, want 200; body %s", i+1, res.Status, res.Body)
				continue
			}
			var answer struct {
				Data json.RawMessage `json:"data"`
			}
			json.Unmarshal(res.Body, &answer)
			var tk expoTicket
			if err := json.Unmarshal(answer.Data, &tk); err != nil {
				t.Errorf("send %d: data is %s, want one ticket object, as Expo answers a message object", i+1, answer.Data)
				continue
			}
			if wantCapped {
				t.Logf("capped message object: %d %s", res.Status, res.Body)
				if len(calls) != 0 {
					t.Errorf("send %d (capped) reached the upstream", i+1)
				}
				if tk.Status != "error" || tk.Details["error"] != "MessageRateExceeded" {
					t.Errorf("send %d (capped): ticket %s, want status error, details.error MessageRateExceeded", i+1, jsonString(tk))
				}
				continue
			}
			if len(calls) != 1 || !calls[0].Object || !equalStrings(calls[0].Recipients, []string{H}) {
				t.Errorf("send %d: the upstream got %s, want the message object once", i+1, jsonString(calls))
				continue
			}
			if tk.Status != "ok" || tk.ID != calls[0].Tickets[0] {
				t.Errorf("send %d: ticket %s, want the upstream's ok ticket %s", i+1, jsonString(tk), calls[0].Tickets[0])
			}
		}
	})
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
