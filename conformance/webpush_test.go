package conformance_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/freqcap/caddy-freqcap/conformance"
)

// webpushSite is a push service gateway on HTTPS (web-push sends with
// https.request only), with a certificate from a test CA: each
// subscription (the last segment of its endpoint, /push/send/<id>) is
// capped at 2 a minute, refused with 429 and Retry-After.
const webpushSite = `https://127.0.0.1:%d {
	tls %s %s
	frequency_cap ` + conformance.WebPushPrefix + `* {
		name webpush
		answer webpush
		dimension recipient {http.request.uri.path.2}
		rule recipient_minute {
			by recipient
			limit 2
			window 1m
		}
	}
	reverse_proxy %s
}
`

type webpushResult struct {
	StatusCode int `json:"statusCode"`
	Error      *struct {
		Name         string            `json:"name"`
		WebPushError bool              `json:"webPushError"`
		Message      string            `json:"message"`
		StatusCode   *int              `json:"statusCode"`
		Headers      map[string]string `json:"headers"`
		Body         string            `json:"body"`
	} `json:"error"`
	Ms   int           `json:"ms"`
	Wire []wireRequest `json:"wire"`
}

// TestWebPushSDK proves, with web-push's sendNotification (VAPID, an
// aes128gcm-encrypted payload) to subscriptions whose endpoints are on the
// gateway (HTTPS, its certificate's CA trusted by the agent given to
// web-push), that a push under the cap is delivered (the push service's
// 201), and that a capped one rejects with the library's WebPushError
// whose statusCode is 429, with Retry-After and a short JSON reason, after
// one HTTP request. The mock push service gets exactly the admitted pushes,
// each with its encrypted body and Content-Encoding as sent.
func TestWebPushSDK(t *testing.T) {
	conformance.RequireNode(t)
	pki := conformance.NewPKI(t)
	mock := &conformance.WebPush{}
	upstream := conformance.Serve(t, mock)
	port := conformance.FreePort(t)
	gw := conformance.StartGateway(t, fmt.Sprintf(webpushSite, port, pki.CertFile, pki.KeyFile, upstream))
	defer gw.Healthy(t)

	endpoint := func(id string) string {
		return fmt.Sprintf("https://127.0.0.1:%d%s%s", port, conformance.WebPushPrefix, id)
	}
	steps := []struct {
		sub    string
		capped bool
	}{{"sub-1", false}, {"sub-1", false}, {"sub-1", true}, {"sub-2", false}}
	var calls []any
	for i, s := range steps {
		calls = append(calls, map[string]string{"endpoint": endpoint(s.sub), "payload": fmt.Sprintf(`{"title":"hello %d"}`, i)})
	}
	var out nodeOutput[webpushResult]
	conformance.RunNode(t, "webpush.mjs", nil, map[string]any{"caFile": pki.RootFile, "calls": calls}, &out)
	t.Logf("%s %s on node %s", out.SDK, out.Version, out.Node)
	if len(out.Results) != len(steps) {
		t.Fatalf("%d results for %d pushes", len(out.Results), len(steps))
	}
	for i, s := range steps {
		r := out.Results[i]
		what := fmt.Sprintf("push %d (to %s)", i+1, s.sub)
		if !s.capped {
			oneRequest(t, what, r.Wire, 201)
			if r.Error != nil || r.StatusCode != 201 {
				t.Errorf("%s: got %s, want 201", what, jsonString(r))
			}
			continue
		}
		oneRequest(t, what, r.Wire, 429)
		e := r.Error
		if e == nil {
			t.Errorf("%s: resolved with %d, want a WebPushError", what, r.StatusCode)
			continue
		}
		t.Logf("%s: %s", what, jsonString(e))
		if !e.WebPushError || e.Name != "WebPushError" || e.StatusCode == nil || *e.StatusCode != 429 {
			t.Errorf("%s: rejected with %s (instanceof WebPushError: %v) statusCode %s, want WebPushError statusCode 429 (%s)",
				what, e.Name, e.WebPushError, statusString(e.StatusCode), e.Message)
		}
		if e.Headers["retry-after"] == "" {
			t.Errorf("%s: no Retry-After in %v", what, e.Headers)
		}
		if !json.Valid([]byte(e.Body)) || len(e.Body) > 512 || strings.Contains(e.Headers["content-type"], "problem+json") {
			t.Errorf("%s: body %q (Content-Type %q), want a short JSON reason (answer webpush), not the default problem+json", what, e.Body, e.Headers["content-type"])
		}
	}
	if got := mock.Count(); got["sub-1"] != 2 || got["sub-2"] != 1 || len(got) != 2 {
		t.Errorf("the mock push service got %v, want sub-1: 2, sub-2: 1", got)
	}
	for _, r := range mock.Requests() {
		if r.ContentEncoding() != "aes128gcm" || len(r.Body) == 0 {
			t.Errorf("the mock push service got Content-Encoding %q and %d body bytes, want the aes128gcm payload as sent", r.ContentEncoding(), len(r.Body))
		}
	}
}
