package gosdk_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/sideshow/apns2"
	"github.com/sideshow/apns2/payload"
	"github.com/sideshow/apns2/token"
	"golang.org/x/net/http2"

	"github.com/freqcap/caddy-freqcap/conformance"
)

// apnsSite is an APNs gateway: HTTPS with HTTP/2 (Caddy's default on TLS),
// a certificate from a test CA; each device token (the third segment of
// /3/device/{token}, Caddy's {http.request.uri.path.2}, in lower case as APNs reads it) is capped at 2 a
// minute, refused as APNs refuses: 429 {"reason":"TooManyRequests"} with
// an apns-id.
const apnsSite = `https://127.0.0.1:%d {
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

// TestAPNsSDK proves, with sideshow/apns2's token client (a P-256 provider
// key made for the test, whose ES256 JWTs the mock APNs verifies) pushing
// to the gateway over HTTP/2 on TLS (the test CA trusted through RootCAs,
// nothing unverified), that a push under the cap is accepted (200 and the
// apns-id), and that a capped push gets StatusCode 429 with Reason
// apns2.ReasonTooManyRequests and an apns-id (the request's own when it
// set one), as APNs answers: first one device token one push after
// another, then 30 pushes at once to 10 device tokens (3 each) on one
// HTTP/2 connection, of which exactly 2 per token are accepted. The mock
// APNs receives exactly the accepted pushes.
func TestAPNsSDK(t *testing.T) {
	pki := conformance.NewPKI(t)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	mock := &conformance.APNs{PublicKey: &key.PublicKey, KeyID: apnsKeyID, TeamID: apnsTeamID}
	upstream := conformance.Serve(t, mock)
	port := conformance.FreePort(t)
	gw := conformance.StartGateway(t, fmt.Sprintf(apnsSite, port, pki.CertFile, pki.KeyFile, upstream))
	defer gw.Healthy(t)

	client := apns2.NewTokenClient(&token.Token{AuthKey: key, KeyID: apnsKeyID, TeamID: apnsTeamID})
	client.Host = fmt.Sprintf("https://127.0.0.1:%d", port)
	// The client's own HTTP/2 transport, trusting the test CA, counting
	// the connections it makes.
	tr, ok := client.HTTPClient.Transport.(*http2.Transport)
	if !ok {
		t.Fatalf("apns2's transport is a %T, not an *http2.Transport", client.HTTPClient.Transport)
	}
	tr.TLSClientConfig = &tls.Config{RootCAs: pki.Pool}
	var dials atomic.Int32
	dial := tr.DialTLS
	tr.DialTLS = func(network, addr string, cfg *tls.Config) (net.Conn, error) {
		dials.Add(1)
		return dial(network, addr, cfg)
	}

	push := func(device, apnsID string) (*apns2.Response, error) {
		return client.PushWithContext(context.Background(), &apns2.Notification{
			DeviceToken: device,
			Topic:       apnsTopic,
			ApnsID:      apnsID,
			Payload:     payload.NewPayload().Alert("hello").Badge(1),
		})
	}
	device := func(i int) string { return fmt.Sprintf("%064x", i+1) }

	t.Run("one device, one push after another", func(t *testing.T) {
		for i, wantCapped := range []bool{false, false, true} {
			id := conformance.UUID()
			res, err := push(device(100), id)
			if err != nil {
				t.Fatalf("push %d: %v", i+1, err)
			}
			t.Logf("push %d: %d reason %q apns-id %s", i+1, res.StatusCode, res.Reason, res.ApnsID)
			if res.ApnsID != id {
				t.Errorf("push %d: apns-id %q, want the request's %q", i+1, res.ApnsID, id)
			}
			if !wantCapped {
				if res.StatusCode != http.StatusOK || !res.Sent() {
					t.Errorf("push %d: %d %q, want 200", i+1, res.StatusCode, res.Reason)
				}
				continue
			}
			if res.StatusCode != http.StatusTooManyRequests || res.Reason != apns2.ReasonTooManyRequests {
				t.Errorf("push %d (capped): %d reason %q, want 429 %q", i+1, res.StatusCode, res.Reason, apns2.ReasonTooManyRequests)
			}
		}
		// Without an apns-id of its own, a denial still carries one.
		res, err := push(device(100), "")
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != http.StatusTooManyRequests || res.ApnsID == "" {
			t.Errorf("push without apns-id (capped): %d apns-id %q, want 429 with a new apns-id", res.StatusCode, res.ApnsID)
		}
	})

	t.Run("30 pushes at once on one connection", func(t *testing.T) {
		const devices, each = 10, 3
		type outcome struct {
			device string
			res    *apns2.Response
			err    error
		}
		out := make(chan outcome, devices*each)
		var wg sync.WaitGroup
		for d := 0; d < devices; d++ {
			for range each {
				wg.Add(1)
				go func() {
					defer wg.Done()
					res, err := push(device(d), "")
					out <- outcome{device(d), res, err}
				}()
			}
		}
		wg.Wait()
		close(out)
		ok, capped := map[string]int{}, map[string]int{}
		for o := range out {
			switch {
			case o.err != nil:
				t.Errorf("push to %s: %v", o.device, o.err)
			case o.res.StatusCode == http.StatusOK && o.res.ApnsID != "":
				ok[o.device]++
			case o.res.StatusCode == http.StatusTooManyRequests && o.res.Reason == apns2.ReasonTooManyRequests && o.res.ApnsID != "":
				capped[o.device]++
			default:
				t.Errorf("push to %s: %d reason %q apns-id %q, want 200 or 429 %s, with an apns-id", o.device, o.res.StatusCode, o.res.Reason, o.res.ApnsID, apns2.ReasonTooManyRequests)
			}
		}
		for d := 0; d < devices; d++ {
			if ok[device(d)] != 2 || capped[device(d)] != 1 {
				t.Errorf("device %d: %d accepted, %d capped, want 2 and 1", d, ok[device(d)], capped[device(d)])
			}
		}
		if n := dials.Load(); n != 1 {
			t.Errorf("the client made %d connections, want 1 (every push on one HTTP/2 connection)", n)
		}
	})

	count := mock.Count()
	if count[device(100)] != 2 {
		t.Errorf("the mock APNs got %d pushes for the first device, want 2", count[device(100)])
	}
	for d := 0; d < 10; d++ {
		if count[device(d)] != 2 {
			t.Errorf("the mock APNs got %d pushes for device %d, want 2", count[device(d)], d)
		}
	}
	for _, r := range mock.Requests() {
		if r.Header.Get("apns-topic") != apnsTopic {
			t.Errorf("the mock APNs got apns-topic %q", r.Header.Get("apns-topic"))
			break
		}
	}
}
