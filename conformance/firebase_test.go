package conformance_test

import (
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/freqcap/caddy-freqcap/conformance"
)

// fcmHost is where firebase-admin sends, whatever it is told
// (FCM_SEND_HOST, a constant of lib/messaging/messaging.js).
const fcmHost = "fcm.googleapis.com"

// fcmEgressSite is the FCM gateway as egress interception deploys it: a
// site for fcm.googleapis.com itself, with a certificate of the test CA
// (NewPKI(t, fcmHost)), on a port of its own, each token capped at 2 a
// minute and capped messages answered as FCM answers its quota
// (answer fcm: 429 RESOURCE_EXHAUSTED, FcmError QUOTA_EXCEEDED).
const fcmEgressSite = `https://` + fcmHost + `:%d {
	tls %s %s
	frequency_cap /v1/projects/*/messages:send {
		name fcm
		answer fcm
		dimension recipient {json.message.token}
		rule recipient_minute {
			by recipient
			limit 2
			window 1m
		}
	}
	reverse_proxy %s
}
`

// h2SchemeOptions adds the h2_scheme listener wrapper to every server:
// firebase-admin's HTTP/2 requests (sendEach, sendEachForMulticast) carry
// ":scheme: https:" (url.parse's protocol, colon and all), which Go's
// HTTP/2 server refuses with PROTOCOL_ERROR; the wrapper rewrites it to
// "https". Caddy puts its TLS listener before every wrapper that does not
// place it (modules/caddyhttp/app.go: the TLS placeholder wrapper is
// prepended), so the wrapper reads the decrypted HTTP/2 frames.
const h2SchemeOptions = `listener_wrappers {
	h2_scheme
}
`

const firebaseProject = "conformance-demo"

// firebaseError is an error as firebase.mjs describes it.
type firebaseError struct {
	Name    string `json:"name"`
	Code    string `json:"code"`
	Message string `json:"message"`
}

type firebaseResult struct {
	Name  string `json:"name"`
	Batch *struct {
		SuccessCount int `json:"successCount"`
		FailureCount int `json:"failureCount"`
		Responses    []struct {
			Success   bool           `json:"success"`
			MessageID string         `json:"messageId"`
			Error     *firebaseError `json:"error"`
		} `json:"responses"`
	} `json:"batch"`
	Error *firebaseError `json:"error"`
	Ms    int            `json:"ms"`
	Wire  []wireRequest  `json:"wire"`
}

// firebaseOutput is what firebase.mjs (and pushnotifications.mjs) print:
// the results and every name the process looked up.
type firebaseOutput[R any] struct {
	nodeOutput[R]
	// The SDKs node-pushnotifications sends with.
	FirebaseAdmin string `json:"firebaseAdmin"`
	NodeAPN       string `json:"nodeAPN"`
	Lookups       []struct {
		Hostname string  `json:"hostname"`
		Address  *string `json:"address"`
	} `json:"lookups"`
}

// checkLookups fails the test if the process looked up a name other than
// the intercepted ones (Google's OAuth or metadata server, say).
func checkLookups[R any](t *testing.T, out firebaseOutput[R], allowed ...string) {
	t.Helper()
	for _, l := range out.Lookups {
		ok := false
		for _, a := range allowed {
			ok = ok || l.Hostname == a
		}
		if !ok || l.Address == nil {
			t.Errorf("the process looked up %s, want only %v: it tried to leave the machine", l.Hostname, allowed)
		}
	}
}

// hasModule reports whether the Caddy binary has module id (caddy
// list-modules).
func hasModule(t *testing.T, id string) bool {
	t.Helper()
	out, err := exec.Command(conformance.CaddyBinary(t), "list-modules").Output()
	if err != nil {
		t.Fatalf("caddy list-modules: %v", err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		if strings.TrimSpace(line) == id {
			return true
		}
	}
	return false
}

// TestFirebaseAdminSDK proves, with firebase-admin's messaging on its own
// transport (it sends to https://fcm.googleapis.com and nowhere else), a
// fake credential (getAccessToken returns a made-up token) and egress
// interception (node/intercept.mjs resolves fcm.googleapis.com to
// 127.0.0.1 and moves port 443 to the gateway's, in the Node process only;
// the gateway's certificate for fcm.googleapis.com is verified against the
// test CA in NODE_EXTRA_CA_CERTS), that:
//
//   - send (HTTP/1.1, https.request) resolves with FCM's message name while
//     the token is under the cap, and rejects a capped message with a
//     FirebaseMessagingError whose code is messaging/message-rate-exceeded,
//     after one request (no retry);
//   - sendEach and sendEachForMulticast, both on the legacy HTTP/1.1
//     transport (enableLegacyHttpTransport) and on the default HTTP/2 one
//     (one session, the messages sent concurrently as streams), resolve
//     (nothing thrown) with a BatchResponse in which each token has exactly
//     2 successes and every message past them fails with
//     messaging/message-rate-exceeded;
//   - the mock FCM receives exactly the admitted messages, and the process
//     looked up no name but fcm.googleapis.com.
//
// The HTTP/2 steps need the h2_scheme listener wrapper (h2SchemeOptions).
func TestFirebaseAdminSDK(t *testing.T) {
	conformance.RequireNode(t)
	pki := conformance.NewPKI(t, fcmHost)
	mock := &conformance.FCM{}
	upstream := conformance.Serve(t, mock)
	port := conformance.FreePort(t)
	wrapper := hasModule(t, "caddy.listeners.h2_scheme")
	options := ""
	if wrapper {
		options = h2SchemeOptions
	}
	gw := conformance.StartCaddyWith(t, options, fmt.Sprintf(fcmEgressSite, port, pki.CertFile, pki.KeyFile, upstream))
	defer gw.Healthy(t)
	env, err := conformance.EgressEnv(pki.RootFile, map[string]int{fcmHost + ":443": port})
	if err != nil {
		t.Fatal(err)
	}

	msg := func(token, body string) map[string]any {
		return map[string]any{"token": token, "notification": map[string]string{"title": "hello", "body": body}}
	}

	t.Run("send", func(t *testing.T) {
		var calls []any
		for i := range 3 {
			calls = append(calls, map[string]any{"send": msg("tok-send", fmt.Sprint("send ", i+1))})
		}
		var out firebaseOutput[firebaseResult]
		conformance.RunNode(t, "firebase.mjs", env, map[string]any{"projectId": firebaseProject, "calls": calls}, &out)
		t.Logf("%s %s on node %s", out.SDK, out.Version, out.Node)
		checkLookups(t, out, fcmHost)
		for i, r := range out.Results {
			what := fmt.Sprintf("send %d", i+1)
			for _, w := range r.Wire {
				if !strings.HasPrefix(w.URL, "https://"+fcmHost+"/v1/projects/"+firebaseProject+"/messages:send") {
					t.Errorf("%s: the SDK requested %s, want https://%s/v1/projects/%s/messages:send", what, w.URL, fcmHost, firebaseProject)
				}
			}
			if i < 2 {
				oneRequest(t, what, r.Wire, 200)
				if r.Error != nil || !strings.HasPrefix(r.Name, "projects/"+firebaseProject+"/messages/") {
					t.Errorf("%s: got %s, want FCM's message name", what, jsonString(r))
				}
				continue
			}
			oneRequest(t, what, r.Wire, 429)
			if r.Error == nil {
				t.Errorf("%s (capped): resolved with %q, want a rejection", what, r.Name)
				continue
			}
			t.Logf("%s (capped): %s", what, jsonString(r.Error))
			if r.Error.Code != "messaging/message-rate-exceeded" || r.Error.Name != "FirebaseMessagingError" {
				t.Errorf("%s (capped): rejected with %s, want FirebaseMessagingError messaging/message-rate-exceeded", what, jsonString(r.Error))
			}
		}
		if got := mock.Count()["tok-send"]; got != 2 {
			t.Errorf("the mock got %d messages for tok-send, want the 2 admitted", got)
		}
	})

	// Each batch step sends to tokens of its own; want is how many messages
	// each token is sent in the step (of which 2 are admitted).
	type batch struct {
		name   string
		legacy bool
		call   func(prefix string) (map[string]any, map[string]int)
	}
	sendEach := func(prefix string) (map[string]any, map[string]int) {
		a, b, c := prefix+"-a", prefix+"-b", prefix+"-c"
		var msgs []any
		for i, tok := range []string{a, b, a, c, a, b, a} {
			msgs = append(msgs, msg(tok, fmt.Sprint("each ", i+1)))
		}
		return map[string]any{"sendEach": msgs}, map[string]int{a: 4, b: 2, c: 1}
	}
	multicast := func(prefix string) (map[string]any, map[string]int) {
		a, b := prefix+"-a", prefix+"-b"
		return map[string]any{"multicast": map[string]any{
			"tokens":       []string{a, b, a, a},
			"notification": map[string]string{"title": "hello", "body": "multicast"},
		}}, map[string]int{a: 3, b: 1}
	}
	steps := []batch{
		{"sendEach over HTTP/1.1 (enableLegacyHttpTransport)", true, sendEach},
		{"sendEachForMulticast over HTTP/1.1 (enableLegacyHttpTransport)", true, multicast},
		{"sendEach over HTTP/2", false, sendEach},
		{"sendEachForMulticast over HTTP/2", false, multicast},
	}
	for i, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			if !step.legacy && !wrapper {
				t.Fatalf("this Caddy has no caddy.listeners.h2_scheme: firebase-admin's HTTP/2 requests carry :scheme \"https:\", which Go's HTTP/2 server refuses")
			}
			call, sent := step.call(fmt.Sprintf("tok-%d", i))
			var out firebaseOutput[firebaseResult]
			conformance.RunNode(t, "firebase.mjs", env, map[string]any{"projectId": firebaseProject, "legacy": step.legacy, "calls": []any{call}}, &out)
			checkLookups(t, out, fcmHost)
			r := out.Results[0]
			if r.Error != nil || r.Batch == nil {
				t.Fatalf("the call threw %s, want a BatchResponse", jsonString(r.Error))
			}
			total := 0
			for _, n := range sent {
				total += n
			}
			if len(r.Batch.Responses) != total {
				t.Fatalf("%d responses for %d messages", len(r.Batch.Responses), total)
			}
			if len(r.Wire) != total {
				t.Errorf("the SDK made %d HTTP requests for %d messages, want one each (no retry): %s", len(r.Wire), total, jsonString(r.Wire))
			}
			var capped []string
			for j, resp := range r.Batch.Responses {
				if resp.Success {
					if !strings.HasPrefix(resp.MessageID, "projects/"+firebaseProject+"/messages/") {
						t.Errorf("response %d: success with messageId %q, want FCM's message name", j, resp.MessageID)
					}
					continue
				}
				capped = append(capped, jsonString(resp.Error))
				if resp.Error == nil || resp.Error.Code != "messaging/message-rate-exceeded" {
					t.Errorf("response %d: failed with %s, want messaging/message-rate-exceeded", j, jsonString(resp.Error))
				}
			}
			if len(capped) > 0 {
				t.Logf("a capped message's error: %s", capped[0])
			}
			admitted := 0
			got := mock.Count()
			for tok, n := range sent {
				want := min(n, 2)
				admitted += want
				if got[tok] != want {
					t.Errorf("the mock got %d messages for %s, want the %d admitted of %d sent", got[tok], tok, want, n)
				}
			}
			if r.Batch.SuccessCount != admitted || r.Batch.FailureCount != total-admitted {
				t.Errorf("successCount %d, failureCount %d, want %d and %d", r.Batch.SuccessCount, r.Batch.FailureCount, admitted, total-admitted)
			}
		})
	}
}
