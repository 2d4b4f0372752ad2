package conformance_test

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/freqcap/caddy-freqcap/conformance"
)

// TestMocks proves, without Caddy or any SDK, that each provider mock
// answers its wire protocol as the provider does: the Expo mock decodes a
// gzipped body and answers one ticket per recipient ("to" arrays
// flattened), one ticket object for a message object, 400 with Expo's
// errors for a body it cannot decode; and the other mocks refuse what
// their provider refuses, in the provider's error format.
func TestMocks(t *testing.T) {
	do := func(h http.Handler, method, path string, header http.Header, body []byte) (*http.Response, string) {
		r := httptest.NewRequest(method, path, bytes.NewReader(body))
		for k, v := range header {
			r.Header[k] = v
		}
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		b, _ := io.ReadAll(w.Result().Body)
		return w.Result(), string(b)
	}
	gz := func(s string) []byte {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write([]byte(s))
		zw.Close()
		return buf.Bytes()
	}

	t.Run("expo", func(t *testing.T) {
		m := &conformance.Expo{}
		res, body := do(m, "POST", conformance.ExpoSendPath, http.Header{"Content-Encoding": {"gzip"}},
			gz(`[{"to":"a"},{"to":["b","c"]}]`))
		var answer struct{ Data []map[string]string }
		if res.StatusCode != 200 || json.Unmarshal([]byte(body), &answer) != nil || len(answer.Data) != 3 {
			t.Errorf("gzipped batch: %d %s, want 200 with 3 tickets", res.StatusCode, body)
		}
		c := m.Calls()[0]
		if c.ContentEncoding() != "gzip" || strings.Join(c.Recipients, ",") != "a,b,c" || c.Tickets[1] != answer.Data[1]["id"] {
			t.Errorf("recorded %q %v %v", c.ContentEncoding(), c.Recipients, c.Tickets)
		}
		res, body = do(m, "POST", conformance.ExpoSendPath, nil, []byte(`{"to":"d","body":"x"}`))
		if res.StatusCode != 200 || !strings.HasPrefix(body, `{"data":{"id":`) {
			t.Errorf("message object: %d %s, want 200 with one ticket object", res.StatusCode, body)
		}
		res, body = do(m, "POST", conformance.ExpoSendPath, http.Header{"Content-Encoding": {"gzip"}}, []byte(`[{"to":"a"}]`))
		if res.StatusCode != 400 || !strings.Contains(body, `"errors"`) {
			t.Errorf("a body that is not gzip: %d %s, want 400 with errors", res.StatusCode, body)
		}
	})

	refusals := []struct {
		name   string
		h      http.Handler
		method string
		path   string
		header http.Header
		body   string
		status int
		want   string
	}{
		{"sendgrid without key", &conformance.SendGrid{}, "POST", conformance.SendGridSendPath, nil, `{}`, 401, `"errors":[{`},
		{"sendgrid without from", &conformance.SendGrid{}, "POST", conformance.SendGridSendPath, http.Header{"Authorization": {"Bearer SG.x"}},
			`{"personalizations":[{"to":[{"email":"a@example.com"}]}]}`, 400, `"field":"from.email"`},
		{"twilio without To", &conformance.Twilio{}, "POST", "/2010-04-01/Accounts/AC0123456789abcdef0123456789abcdef/Messages.json",
			http.Header{"Authorization": {"Basic QUMwMTIzNDU2Nzg5YWJjZGVmMDEyMzQ1Njc4OWFiY2RlZjp0"}, "Content-Type": {"application/x-www-form-urlencoded"}},
			`From=%2B1555&Body=hi`, 400, `"code":21604`},
		{"fcm without token", &conformance.FCM{}, "POST", "/v1/projects/p/messages:send", nil, `{"message":{"token":"t"}}`, 401, `"status":"UNAUTHENTICATED"`},
		{"webpush without TTL", &conformance.WebPush{}, "POST", conformance.WebPushPrefix + "s", nil, ``, 400, `TTL`},
		{"apns without provider token", &conformance.APNs{}, "POST", "/3/device/abcd", nil, `{"aps":{}}`, 403, `{"reason":"MissingProviderToken"}`},
		{"gorush without notifications", &conformance.Gorush{}, "POST", conformance.GorushPushPath, nil, `{}`, 400, `{"code":400,"message":"Missing notifications field."}`},
		{"gorush with none", &conformance.Gorush{}, "POST", conformance.GorushPushPath, nil, `{"notifications":[]}`, 400, `{"code":400,"message":"Notifications field is empty."}`},
	}
	for _, r := range refusals {
		res, body := do(r.h, r.method, r.path, r.header, []byte(r.body))
		if res.StatusCode != r.status || !strings.Contains(body, r.want) {
			t.Errorf("%s: %d %s, want %d with %s", r.name, res.StatusCode, body, r.status, r.want)
		}
	}
}
