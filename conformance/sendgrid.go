package conformance

import (
	"encoding/json"
	"net/http"
	"strings"
	"sync"
)

// SendGridSendPath is the path of SendGrid's v3 Mail Send API.
const SendGridSendPath = "/v3/mail/send"

// SendGrid is a mock of SendGrid's v3 Mail Send API (POST /v3/mail/send)
// as api.sendgrid.com answers a valid request: a JSON body with
// personalizations[].to[].email and from.email, sent with
// "Authorization: Bearer <key>", gets 202 Accepted with an empty body and
// an X-Message-Id header. A request without a key gets 401, an invalid
// body 400, each with SendGrid's {"errors": [{"message", "field", "help"}]}.
type SendGrid struct {
	Recorder

	mu    sync.Mutex
	mails [][]string
}

// Mails returns the addressees of each accepted mail: each
// personalization's to, cc and bcc emails, in that order (SendGrid
// delivers to all three).
func (s *SendGrid) Mails() [][]string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([][]string(nil), s.mails...)
}

// Count returns how many accepted mails were addressed to each address.
func (s *SendGrid) Count() map[string]int {
	n := map[string]int{}
	for _, m := range s.Mails() {
		for _, a := range m {
			n[a]++
		}
	}
	return n
}

func (s *SendGrid) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	got := s.read(r)
	if r.Method != http.MethodPost || r.URL.Path != SendGridSendPath {
		sendgridError(w, http.StatusNotFound, "not found", nil)
		return
	}
	if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
		sendgridError(w, http.StatusUnauthorized, "The provided authorization grant is invalid, expired, or revoked", nil)
		return
	}
	type address struct {
		Email string `json:"email"`
	}
	var body struct {
		Personalizations []struct {
			To  []address `json:"to"`
			Cc  []address `json:"cc"`
			Bcc []address `json:"bcc"`
		} `json:"personalizations"`
		From *struct {
			Email string `json:"email"`
		} `json:"from"`
	}
	if got.DecodeErr != nil || json.Unmarshal(got.Decoded, &body) != nil {
		sendgridError(w, http.StatusBadRequest, "Bad Request", nil)
		return
	}
	if len(body.Personalizations) == 0 {
		f := "personalizations"
		sendgridError(w, http.StatusBadRequest, "The personalizations field is required and must have at least one personalization.", &f)
		return
	}
	if body.From == nil || body.From.Email == "" {
		f := "from.email"
		sendgridError(w, http.StatusBadRequest, "The from email does not contain a valid address.", &f)
		return
	}
	var to []string
	for _, p := range body.Personalizations {
		for _, list := range [][]address{p.To, p.Cc, p.Bcc} {
			for _, a := range list {
				to = append(to, a.Email)
			}
		}
	}
	s.mu.Lock()
	s.mails = append(s.mails, to)
	s.mu.Unlock()
	w.Header().Set("X-Message-Id", strings.ReplaceAll(UUID(), "-", "")[:22])
	w.WriteHeader(http.StatusAccepted)
}

func sendgridError(w http.ResponseWriter, status int, msg string, field *string) {
	b, _ := json.Marshal(map[string]any{"errors": []map[string]any{{"message": msg, "field": field, "help": nil}}})
	writeJSON(w, status, string(b))
}
