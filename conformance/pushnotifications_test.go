package conformance_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/freqcap/caddy-freqcap/conformance"
)

// apnsHost is where node-apn sends with production: true.
const apnsHost = "api.push.apple.com"

type pnMessage struct {
	RegID         string         `json:"regId"`
	OriginalRegID *string        `json:"originalRegId"`
	MessageID     *string        `json:"messageId"`
	Error         *firebaseError `json:"error"`
	ErrorMsg      *string        `json:"errorMsg"`
}

type pnResult struct {
	Results []struct {
		Method  string      `json:"method"`
		Success int         `json:"success"`
		Failure int         `json:"failure"`
		Message []pnMessage `json:"message"`
	} `json:"results"`
	Error *firebaseError `json:"error"`
	Ms    int            `json:"ms"`
	Wire  []wireRequest  `json:"wire"`
}

// TestNodePushNotifications proves, with node-pushnotifications' send
// (its FCM path is its own firebase-admin's sendEachForMulticast on the
// HTTP/2 transport, its APNs path @parse/node-apn), both reached by egress
// interception (fcm.googleapis.com and api.push.apple.com resolve to
// 127.0.0.1 in the Node process, port 443 moves to the gateway's site for
// each; the gateway's certificates for them are verified against the test
// CA in NODE_EXTRA_CA_CERTS), that send resolves (nothing thrown) with one
// result a method whose success and failure counts are the admitted and
// capped messages, each capped message carrying the provider's refusal:
// for APNs the error "TooManyRequests", for FCM the gateway's message
// (node-pushnotifications keeps firebase-admin's message, not its code).
// The mocks receive exactly the admitted messages, and the process looked
// up no other name. The FCM path needs the h2_scheme listener wrapper, as
// firebase-admin's sendEach does.
func TestNodePushNotifications(t *testing.T) {
	conformance.RequireNode(t)
	pki := conformance.NewPKI(t, fcmHost, apnsHost)
	fcm := &conformance.FCM{}
	keyFile, apns := apnsKey(t)
	fcmPort, apnsPort := conformance.FreePort(t), conformance.FreePort(t)
	wrapper := hasModule(t, "caddy.listeners.h2_scheme")
	options := ""
	if wrapper {
		options = h2SchemeOptions
	}
	gw := conformance.StartCaddyWith(t, options,
		fmt.Sprintf(fcmEgressSite, fcmPort, pki.CertFile, pki.KeyFile, conformance.Serve(t, fcm))+
			fmt.Sprintf(apnsSite, apnsHost, apnsPort, pki.CertFile, pki.KeyFile, conformance.Serve(t, apns)))
	defer gw.Healthy(t)
	env, err := conformance.EgressEnv(pki.RootFile, map[string]int{fcmHost + ":443": fcmPort, apnsHost + ":443": apnsPort})
	if err != nil {
		t.Fatal(err)
	}

	fcmToken := func(name string) string { return "fcm-" + name + "-" + strings.Repeat("x", 70) } // over 64: an FCM token to it
	data := map[string]any{"title": "hello", "body": "from node-pushnotifications", "topic": apnsTopic}
	type reg struct{ ID, Type string }
	steps := []struct {
		name    string
		regs    []reg
		fcmPath bool
	}{
		{"APNs", []reg{{deviceToken(201), "apn"}, {deviceToken(202), "apn"}, {deviceToken(201), "apn"}, {deviceToken(201), "apn"}}, false},
		{"FCM", []reg{{fcmToken("a"), "fcm"}, {fcmToken("a"), "fcm"}, {fcmToken("b"), "fcm"}, {fcmToken("a"), "fcm"}}, true},
		{"FCM and APNs in one send", []reg{{fcmToken("c"), "fcm"}, {deviceToken(203), "apn"}, {fcmToken("c"), "fcm"}, {deviceToken(203), "apn"}, {fcmToken("c"), "fcm"}, {deviceToken(203), "apn"}}, true},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			if step.fcmPath && !wrapper {
				t.Fatalf("this Caddy has no caddy.listeners.h2_scheme: firebase-admin's HTTP/2 requests carry :scheme \"https:\", which Go's HTTP/2 server refuses")
			}
			var regIDs []map[string]string
			sent := map[string]map[string]int{"fcm": {}, "apn": {}}
			for _, r := range step.regs {
				regIDs = append(regIDs, map[string]string{"id": r.ID, "type": r.Type})
				sent[r.Type][r.ID]++
			}
			var out firebaseOutput[pnResult]
			conformance.RunNode(t, "pushnotifications.mjs", env, map[string]any{
				"projectId": firebaseProject,
				"apn":       map[string]string{"keyFile": keyFile, "keyId": apnsKeyID, "teamId": apnsTeamID},
				"calls":     []any{map[string]any{"regIds": regIDs, "data": data}},
			}, &out)
			t.Logf("%s %s (firebase-admin %s, @parse/node-apn %s) on node %s", out.SDK, out.Version, out.FirebaseAdmin, out.NodeAPN, out.Node)
			checkLookups(t, out, fcmHost, apnsHost)
			r := out.Results[0]
			if r.Error != nil {
				t.Fatalf("send threw %s", jsonString(r.Error))
			}
			for _, res := range r.Results {
				counts, ok := sent[res.Method]
				if !ok {
					t.Errorf("a result for method %q: %s", res.Method, jsonString(res))
					continue
				}
				total, admitted := 0, 0
				for _, n := range counts {
					total += n
					admitted += min(n, 2)
				}
				if res.Success != admitted || res.Failure != total-admitted || len(res.Message) != total {
					t.Errorf("%s: success %d, failure %d, %d messages, want %d, %d, %d", res.Method, res.Success, res.Failure, len(res.Message), admitted, total-admitted, total)
				}
				logged := false
				for _, m := range res.Message {
					if m.Error == nil {
						continue
					}
					if !logged {
						t.Logf("%s: a capped message: %s", res.Method, jsonString(m))
						logged = true
					}
					switch res.Method {
					case "apn":
						if m.ErrorMsg == nil || *m.ErrorMsg != "TooManyRequests" || m.Error.Message != "TooManyRequests" {
							t.Errorf("apn: failed with %s, want error TooManyRequests", jsonString(m))
						}
					case "fcm":
						if m.ErrorMsg == nil || !strings.Contains(*m.ErrorMsg, "recipient_minute") {
							t.Errorf("fcm: failed with %s, want the gateway's message (rule recipient_minute ...)", jsonString(m))
						}
					}
				}
				delete(sent, res.Method)
			}
			for method, counts := range sent {
				if len(counts) > 0 {
					t.Errorf("no result for method %s", method)
				}
			}
			for _, r := range step.regs {
				var got int
				switch r.Type {
				case "fcm":
					got = fcm.Count()[r.ID]
				case "apn":
					got = apns.Count()[r.ID]
				}
				n := 0
				for _, o := range step.regs {
					if o == r {
						n++
					}
				}
				if got != min(n, 2) {
					t.Errorf("the %s mock got %d messages for %s, want the %d admitted of %d", r.Type, got, r.ID, min(n, 2), n)
				}
			}
		})
	}
}
