package conformance_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/freqcap/caddy-freqcap/conformance"
)

// apnsSite is the APNs gateway: HTTPS (APNs is HTTP/2 over TLS only) with
// a certificate of the test CA, each device token (/3/device/<token>)
// capped at 2 a minute, capped pushes answered as APNs answers a device's
// excess (answer apns: 429 {"reason":"TooManyRequests"} with an apns-id).
const apnsSite = `https://%s:%d {
	tls %s %s
	frequency_cap /3/device/* {
		name apns
		answer apns
		dimension recipient {lower.http.request.uri.path.2}
		rule recipient_minute {
			by recipient
			limit 2
			window 1m
		}
	}
	reverse_proxy %s
}
`

const (
	apnsKeyID  = "ABC123DEFG"
	apnsTeamID = "DEF123GHIJ"
	apnsTopic  = "com.example.conformance"
)

// apnsKey makes a provider token key (P-256, PKCS #8 PEM as Apple's .p8
// files are), writes it to a file and returns the file and a mock APNs
// that checks the tokens signed with it.
func apnsKey(t *testing.T) (string, *conformance.APNs) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "AuthKey_"+apnsKeyID+".p8")
	if err := os.WriteFile(file, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return file, &conformance.APNs{PublicKey: &key.PublicKey, KeyID: apnsKeyID, TeamID: apnsTeamID}
}

func deviceToken(i int) string { return fmt.Sprintf("%064x", i) }

// apnFailure is one of node-apn's failed[] entries.
type apnFailure struct {
	Device   string `json:"device"`
	Status   *int   `json:"status"`
	Response *struct {
		Reason string `json:"reason"`
	} `json:"response"`
	Error *string `json:"error"`
}

type apnResult struct {
	Sent []struct {
		Device string `json:"device"`
	} `json:"sent"`
	Failed []apnFailure `json:"failed"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error"`
	Ms   int           `json:"ms"`
	Wire []wireRequest `json:"wire"`
}

// nodeAPNRetries is how many times @parse/node-apn sends a push again after
// a 429 (its connectionRetryLimit, 3 by default: lib/client.js retries 408,
// 429, 500, 502, 503 and 504). It waits Retry-After seconds first, but reads
// the header as headers['Retry-After'], which Node's HTTP/2 headers (lower
// case) never have, so it retries at once.
const nodeAPNRetries = 3

// TestNodeAPN proves, with @parse/node-apn's Provider (token auth: the mock
// verifies the ES256 JWTs; one HTTP/2 session over TLS, the gateway named
// by the address and port options and its CA by the ca option), that a
// push under the cap is sent, and that a capped push is in failed[] with
// status 429 and response.reason "TooManyRequests", nothing thrown: one
// device push after push, then 30 pushes to 10 devices in one send (30
// concurrent streams on the one session): exactly 2 per device sent. The
// SDK sends a capped push again nodeAPNRetries times, each answered 429
// too; the mock APNs receives exactly the admitted pushes.
func TestNodeAPN(t *testing.T) {
	conformance.RequireNode(t)
	pki := conformance.NewPKI(t)
	keyFile, mock := apnsKey(t)
	upstream := conformance.Serve(t, mock)
	port := conformance.FreePort(t)
	gw := conformance.StartGateway(t, fmt.Sprintf(apnsSite, "127.0.0.1", port, pki.CertFile, pki.KeyFile, upstream))
	defer gw.Healthy(t)

	one := deviceToken(1)
	var many []string
	for range 3 {
		for d := range 10 {
			many = append(many, deviceToken(100+d))
		}
	}
	calls := []any{
		map[string]any{"devices": []string{one}, "alert": "push 1"},
		map[string]any{"devices": []string{one}, "alert": "push 2"},
		map[string]any{"devices": []string{one}, "alert": "push 3"},
		map[string]any{"devices": many, "alert": "concurrent"},
	}
	var out nodeOutput[apnResult]
	conformance.RunNode(t, "nodeapn.mjs", nil, map[string]any{
		"address": "127.0.0.1",
		"port":    port,
		"caFile":  pki.RootFile,
		"keyFile": keyFile,
		"keyId":   apnsKeyID,
		"teamId":  apnsTeamID,
		"topic":   apnsTopic,
		"calls":   calls,
	}, &out)
	t.Logf("%s %s on node %s", out.SDK, out.Version, out.Node)
	if len(out.Results) != len(calls) {
		t.Fatalf("%d results for %d calls", len(out.Results), len(calls))
	}

	checkCapped := func(what string, f apnFailure) {
		t.Helper()
		if f.Status == nil || *f.Status != 429 || f.Response == nil || f.Response.Reason != "TooManyRequests" {
			t.Errorf("%s: failed with %s, want status 429 and response.reason TooManyRequests", what, jsonString(f))
		}
	}
	// checkWire: admitted pushes made one request (200), capped ones
	// 1+nodeAPNRetries (all 429).
	checkWire := func(what string, r apnResult) {
		t.Helper()
		n := map[int]int{}
		for _, w := range r.Wire {
			if w.Status != nil {
				n[*w.Status]++
			} else {
				n[0]++
			}
		}
		if want := map[int]int{200: len(r.Sent), 429: len(r.Failed) * (1 + nodeAPNRetries)}; n[200] != want[200] || n[429] != want[429] || len(n) > 2 {
			t.Errorf("%s: requests by status %v, want %v (one request a sent push, %d a capped one)", what, n, want, 1+nodeAPNRetries)
		}
	}

	for i, r := range out.Results[:3] {
		what := fmt.Sprintf("push %d to one device", i+1)
		if r.Error != nil {
			t.Errorf("%s: send threw %s", what, r.Error.Message)
			continue
		}
		checkWire(what, r)
		if i < 2 {
			if len(r.Sent) != 1 || len(r.Failed) != 0 {
				t.Errorf("%s: sent %d, failed %s, want it sent", what, len(r.Sent), jsonString(r.Failed))
			}
			continue
		}
		if len(r.Sent) != 0 || len(r.Failed) != 1 {
			t.Errorf("%s (capped): sent %d, failed %d, want it failed", what, len(r.Sent), len(r.Failed))
			continue
		}
		t.Logf("%s (capped): failed[0] = %s after %d requests", what, jsonString(r.Failed[0]), len(r.Wire))
		checkCapped(what, r.Failed[0])
	}

	r := out.Results[3]
	if r.Error != nil {
		t.Fatalf("30 concurrent pushes: send threw %s", r.Error.Message)
	}
	checkWire("30 concurrent pushes", r)
	sent := map[string]int{}
	for _, s := range r.Sent {
		sent[s.Device]++
	}
	for _, f := range r.Failed {
		checkCapped("a capped concurrent push to "+f.Device, f)
	}
	for d := range 10 {
		if tok := deviceToken(100 + d); sent[tok] != 2 {
			t.Errorf("device %d: %d of its 3 pushes sent, want exactly 2", d, sent[tok])
		}
	}
	if len(r.Failed) != 10 {
		t.Errorf("%d pushes failed, want 10 (one a device)", len(r.Failed))
	}

	got := mock.Count()
	want := map[string]int{one: 2}
	for d := range 10 {
		want[deviceToken(100+d)] = 2
	}
	if len(got) != len(want) {
		t.Errorf("the mock APNs got pushes for %d devices, want %d: %v", len(got), len(want), got)
	}
	for tok, n := range want {
		if got[tok] != n {
			t.Errorf("the mock APNs got %d pushes for %s, want the %d admitted", got[tok], tok, n)
		}
	}
}
