package support

import "testing"

// TestPlaceholderWords proves how the console and the answers' notes put
// placeholders: each in words, the text around it kept.
func TestPlaceholderWords(t *testing.T) {
	for expr, want := range map[string]string{
		"{http.request.header.X-Kind}":   "header X-Kind",
		"{header.X-TZ}":                  "header X-TZ",
		"{json.message.token}":           "JSON message.token",
		"{form.to}":                      "form field to",
		"{http.request.uri.query.tier}":  "query tier",
		"{http.request.cookie.tz}":       "cookie tz",
		"{http.vars.tier}":               "variable tier",
		"{http.auth.user.id}":            "the signed-in user",
		"{http.request.remote.host}":     "client IP",
		"{tier_day}":                     "tier_day",
		"{fcm_topics.message.condition}": "FCM condition topics of JSON message.condition",
		"tz-{json.region}/{json.city}":   "tz-JSON region/JSON city",
		"no placeholder":                 "no placeholder",
		"{unclosed":                      "{unclosed",
	} {
		if got := placeholderWords(expr); got != want {
			t.Errorf("%s: %q, want %q", expr, got, want)
		}
	}
}
