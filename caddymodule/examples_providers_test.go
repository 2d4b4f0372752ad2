package caddymodule_test

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// testFCMGateway: a registration token's 16th message within a minute is
// answered as FCM answers a quota error, with the FcmError detail that
// firebase-admin keys on, and never reaches FCM; a body that is not JSON
// is FCM's INVALID_ARGUMENT; the same text in another field (Android's,
// APNs' alert, a title) is the same content, and a data-only message has
// none; a dry run (validate_only) passes uncounted. (The Admin SDK
// reading these answers is conformance/gosdk's test.)
func testFCMGateway(t *testing.T, path string) {
	up := startUpstream(t)
	g := startExample(t, path, up)
	token := unique("fcm-token")
	const send = "/v1/projects/demo/messages:send"
	msg := func(body string) map[string]any {
		return map[string]any{"message": map[string]any{"token": token, "notification": map[string]any{"body": body}}}
	}
	for i := 0; i < 15; i++ {
		expectStatus(t, g.send(send, msg(fmt.Sprint("news ", i))), http.StatusOK)
	}
	a := g.send(send, msg("one more"))
	expectStatus(t, a, http.StatusTooManyRequests)
	if !strings.Contains(string(a.body), `"status":"RESOURCE_EXHAUSTED"`) || !strings.Contains(string(a.body), `"errorCode":"QUOTA_EXCEEDED"`) || a.header.Get("Retry-After") == "" {
		t.Errorf("the 16th message: %s", a.body)
	}
	if up.count() != 15 {
		t.Errorf("FCM got %d messages, want 15", up.count())
	}
	a = g.post(send, "application/json", `{"message":`)
	expectStatus(t, a, http.StatusBadRequest)
	if !strings.Contains(string(a.body), `"status":"INVALID_ARGUMENT"`) {
		t.Errorf("a body that is not JSON: %s", a.body)
	}
	// The same text is one content wherever the message puts it: twice
	// as the notification's, the third time as Android's is refused, and
	// so is the title and body run together as a title alone.
	other := unique("fcm-token")
	for i, m := range []string{
		`{"message":{"token":%q,"notification":{"title":"Sale","body":"50%% off"}}}`,
		`{"message":{"token":%q,"android":{"notification":{"title":"Sale","body":"50%% off"}}}}`,
		`{"message":{"token":%q,"notification":{"title":"Sale50%% off"}}}`,
		`{"message":{"token":%q,"apns":{"payload":{"aps":{"alert":"Sale50%% off"}}}}}`,
	} {
		want := http.StatusOK
		if i >= 2 {
			want = http.StatusTooManyRequests
		}
		expectStatus(t, g.post(send, "application/json", fmt.Sprintf(m, other)), want)
	}
	// A dry run delivers nothing and passes uncounted, in either
	// spelling; one that says both true and false is counted.
	dry := unique("fcm-token")
	for range 20 {
		expectStatus(t, g.post(send, "application/json", fmt.Sprintf(`{"validate_only":true,"message":{"token":%q,"notification":{"body":"x"}}}`, dry)), http.StatusOK)
		expectStatus(t, g.post(send, "application/json", fmt.Sprintf(`{"validateOnly":true,"message":{"token":%q,"notification":{"body":"x"}}}`, dry)), http.StatusOK)
	}
	expectStatus(t, g.post(send, "application/json", fmt.Sprintf(`{"message":{"token":%q,"notification":{"body":"x"}}}`, dry)), http.StatusOK)
	expectStatus(t, g.post(send, "application/json", fmt.Sprintf(`{"validate_only":true,"validateOnly":false,"message":{"token":%q,"notification":{"body":"x"}}}`, dry)), http.StatusOK)
	expectStatus(t, g.post(send, "application/json", fmt.Sprintf(`{"message":{"token":%q,"notification":{"body":"x"}}}`, dry)), http.StatusTooManyRequests)
	// A data-only message has no text: capped by the per-token rules
	// alone.
	for range 3 {
		expectStatus(t, g.post(send, "application/json", fmt.Sprintf(`{"message":{"token":%q,"data":{"k":"v"}}}`, other)), http.StatusOK)
	}
}

// testAPNsGateway runs the example as shipped (only its ports, admin
// endpoint and upstream changed) in a Caddy process: over HTTPS with
// HTTP/2 and the certificate of Caddy's own CA, a device token's 16th push
// within a minute, and the third with the same apns-collapse-id within
// 59 s, are answered 429 {"reason":"TooManyRequests"} with the push's
// apns-id, as APNs answers; admitted pushes get the upstream's answer.
func testAPNsGateway(t *testing.T, path string) {
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	port, adminP, mock := freePort(t), freePort(t), freePort(t)
	cfg := string(data)
	for _, r := range []struct{ old, new string }{
		{"\n\tauto_https disable_redirects\n}", fmt.Sprintf("\n\tauto_https disable_redirects\n\tadmin 127.0.0.1:%d\n\tpersist_config off\n}", adminP)},
		{"\nhttps://localhost:8443 {", fmt.Sprintf("\nhttps://localhost:%d {", port)},
		{"reverse_proxy 127.0.0.1:9000", fmt.Sprintf("reverse_proxy 127.0.0.1:%d", mock)},
		{"\nhttp://:9000 {", fmt.Sprintf("\nhttp://:%d {", mock)},
	} {
		if strings.Count(cfg, r.old) != 1 {
			t.Fatalf("%s: expected %q once", path, strings.TrimSpace(r.old))
		}
		cfg = strings.Replace(cfg, r.old, r.new, 1)
	}
	url := fmt.Sprintf("https://localhost:%d", port)
	p := runCaddyfile(t, caddyBinary(t), cfg, url, fmt.Sprintf("http://127.0.0.1:%d", adminP))

	// Trust the root of the process's own CA, as a sender would be given it.
	root := filepath.Join(p.dir, "caddy", "pki", "authorities", "local", "root.crt")
	var pem []byte
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if pem, err = os.ReadFile(root); err == nil || time.Now().After(deadline) {
			break
		}
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		t.Fatalf("no root certificate at %s: %v", root, err)
	}
	client := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true,
	}}
	push := func(token, collapse string) (*http.Response, string) {
		t.Helper()
		var res *http.Response
		var err error
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			req, _ := http.NewRequest(http.MethodPost, url+"/3/device/"+token, strings.NewReader(`{"aps":{"alert":"hi"}}`))
			req.Header.Set("apns-id", "123e4567-e89b-42d3-a456-426614174000")
			if collapse != "" {
				req.Header.Set("apns-collapse-id", collapse)
			}
			// The certificate is issued as Caddy starts: until then the
			// handshake fails, and nothing was sent.
			if res, err = client.Do(req); err == nil || time.Now().After(deadline) {
				break
			}
		}
		if err != nil {
			t.Fatalf("push to %s: %v", token, err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.ProtoMajor != 2 {
			t.Errorf("the gateway answered over %s, want HTTP/2", res.Proto)
		}
		return res, string(b)
	}
	for i := 0; i < 15; i++ {
		if res, body := push("a1b2c3", ""); res.StatusCode != http.StatusOK || res.Header.Get("apns-id") == "" {
			t.Fatalf("push %d: %d %s", i, res.StatusCode, body)
		}
	}
	res, body := push("a1b2c3", "")
	if res.StatusCode != http.StatusTooManyRequests || body != "{\"reason\":\"TooManyRequests\"}\n" || res.Header.Get("apns-id") != "123e4567-e89b-42d3-a456-426614174000" {
		t.Errorf("the 16th push: %d %q apns-id %q", res.StatusCode, body, res.Header.Get("apns-id"))
	}
	// APNs reads a token's hex case-blind: the same device upper-cased is
	// capped too.
	if res, body := push("A1B2C3", ""); res.StatusCode != http.StatusTooManyRequests {
		t.Errorf("the token upper-cased passed its cap: %d %s", res.StatusCode, body)
	}
	for i, want := range []int{200, 200, 429} {
		if res, body := push("d4e5f6", "sale"); res.StatusCode != want {
			t.Errorf("push %d of the same alert: %d %s, want %d", i, res.StatusCode, body, want)
		}
	}
	p.healthy(t)
}
