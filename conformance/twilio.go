package conformance

import (
	"encoding/json"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"
)

// twilioMessagesPath matches /2010-04-01/Accounts/{AccountSid}/Messages.json.
var twilioMessagesPath = regexp.MustCompile(`^/2010-04-01/Accounts/(AC[0-9a-fA-F]{32})/Messages\.json$`)

// Twilio is a mock of Twilio's Programmable Messaging API as
// api.twilio.com answers a valid request: POST
// /2010-04-01/Accounts/{AccountSid}/Messages.json with HTTP basic auth (the
// account SID as the user) and a form-encoded body with To, From and Body
// creates a message: 201 Created with the Message resource (JSON, status
// "queued"). Errors are Twilio's {"code", "message", "more_info", "status"}:
// 401 (20003) without credentials for the account, 404 (20404) elsewhere,
// 400 (21604/21603/21602) when To, From or Body is missing.
type Twilio struct {
	Recorder

	mu   sync.Mutex
	sent []url.Values
}

// Sent returns the form of every message created, in order.
func (tw *Twilio) Sent() []url.Values {
	tw.mu.Lock()
	defer tw.mu.Unlock()
	return append([]url.Values(nil), tw.sent...)
}

// Count returns how many messages were created for each To.
func (tw *Twilio) Count() map[string]int {
	n := map[string]int{}
	for _, f := range tw.Sent() {
		n[f.Get("To")]++
	}
	return n
}

func (tw *Twilio) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	got := tw.read(r)
	m := twilioMessagesPath.FindStringSubmatch(r.URL.Path)
	if m == nil || r.Method != http.MethodPost {
		twilioError(w, http.StatusNotFound, 20404, "The requested resource "+r.URL.Path+" was not found")
		return
	}
	sid := m[1]
	if user, pass, ok := r.BasicAuth(); !ok || user != sid || pass == "" {
		twilioError(w, http.StatusUnauthorized, 20003, "Authenticate")
		return
	}
	form, err := url.ParseQuery(string(got.Decoded))
	if got.DecodeErr != nil || err != nil || !strings.HasPrefix(r.Header.Get("Content-Type"), "application/x-www-form-urlencoded") {
		twilioError(w, http.StatusBadRequest, 21100, "Accept parameters are invalid")
		return
	}
	switch {
	case form.Get("To") == "":
		twilioError(w, http.StatusBadRequest, 21604, "A 'To' phone number is required.")
		return
	case form.Get("From") == "" && form.Get("MessagingServiceSid") == "":
		twilioError(w, http.StatusBadRequest, 21603, "A 'From' or 'MessagingServiceSid' parameter is required to send a message")
		return
	case form.Get("Body") == "" && form.Get("MediaUrl") == "" && form.Get("ContentSid") == "":
		twilioError(w, http.StatusBadRequest, 21602, "Message body is required.")
		return
	}
	tw.mu.Lock()
	tw.sent = append(tw.sent, form)
	tw.mu.Unlock()

	msid := "SM" + strings.ReplaceAll(UUID(), "-", "")
	now := time.Now().UTC().Format(time.RFC1123Z)
	b, _ := json.Marshal(map[string]any{
		"account_sid":           sid,
		"api_version":           "2010-04-01",
		"body":                  form.Get("Body"),
		"date_created":          now,
		"date_sent":             nil,
		"date_updated":          now,
		"direction":             "outbound-api",
		"error_code":            nil,
		"error_message":         nil,
		"from":                  form.Get("From"),
		"messaging_service_sid": nil,
		"num_media":             "0",
		"num_segments":          "1",
		"price":                 nil,
		"price_unit":            "USD",
		"sid":                   msid,
		"status":                "queued",
		"subresource_uris":      map[string]string{"media": "/2010-04-01/Accounts/" + sid + "/Messages/" + msid + "/Media.json"},
		"to":                    form.Get("To"),
		"uri":                   "/2010-04-01/Accounts/" + sid + "/Messages/" + msid + ".json",
	})
	writeJSON(w, http.StatusCreated, string(b))
}

func twilioError(w http.ResponseWriter, status, code int, msg string) {
	b, _ := json.Marshal(map[string]any{
		"code": code, "message": msg, "status": status,
		"more_info": "https://www.twilio.com/docs/errors/" + itoa(code),
	})
	writeJSON(w, status, string(b))
}

func itoa(n int) string {
	b, _ := json.Marshal(n)
	return string(b)
}
