package conformance

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"sync"
)

// fcmSendPath matches /v1/projects/{project}/messages:send.
var fcmSendPath = regexp.MustCompile(`^/v1/projects/([^/]+)/messages:send$`)

// FCM is a mock of Firebase Cloud Messaging's HTTP v1 API as
// fcm.googleapis.com answers a valid request: POST
// /v1/projects/{project}/messages:send with "Authorization: Bearer <token>"
// and {"message": {...}} naming exactly one of token, topic and condition
// gets 200 {"name": "projects/{project}/messages/<id>"}. Errors are Google's
// {"error": {"code", "message", "status", "details": [FcmError]}}: 401
// UNAUTHENTICATED without a bearer token, 400 INVALID_ARGUMENT for a bad
// body, 404 NOT_FOUND elsewhere.
type FCM struct {
	Recorder

	mu     sync.Mutex
	tokens []string
}

// Sent returns the target (token, or "topic:"/"condition:" and its value)
// of every accepted message, in order.
func (f *FCM) Sent() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.tokens...)
}

// Count returns how many messages each target got.
func (f *FCM) Count() map[string]int {
	n := map[string]int{}
	for _, s := range f.Sent() {
		n[s]++
	}
	return n
}

func (f *FCM) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	got := f.read(r)
	m := fcmSendPath.FindStringSubmatch(r.URL.Path)
	if m == nil || r.Method != http.MethodPost {
		fcmError(w, http.StatusNotFound, "NOT_FOUND", "Requested entity was not found.", "")
		return
	}
	if !strings.HasPrefix(r.Header.Get("Authorization"), "Bearer ") {
		fcmError(w, http.StatusUnauthorized, "UNAUTHENTICATED", "Request is missing required authentication credential.", "")
		return
	}
	var req struct {
		Message *struct {
			Token     string `json:"token"`
			Topic     string `json:"topic"`
			Condition string `json:"condition"`
		} `json:"message"`
		ValidateOnly bool `json:"validate_only"`
	}
	if got.DecodeErr != nil || json.Unmarshal(got.Decoded, &req) != nil || req.Message == nil {
		fcmError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "Invalid JSON payload received.", "INVALID_ARGUMENT")
		return
	}
	target, n := "", 0
	if req.Message.Token != "" {
		target, n = req.Message.Token, n+1
	}
	if req.Message.Topic != "" {
		target, n = "topic:"+req.Message.Topic, n+1
	}
	if req.Message.Condition != "" {
		target, n = "condition:"+req.Message.Condition, n+1
	}
	if n != 1 {
		fcmError(w, http.StatusBadRequest, "INVALID_ARGUMENT", "Exactly one of token, topic or condition must be set.", "INVALID_ARGUMENT")
		return
	}
	id := "0:" + strings.ReplaceAll(UUID(), "-", "")
	if !req.ValidateOnly {
		f.mu.Lock()
		f.tokens = append(f.tokens, target)
		f.mu.Unlock()
	} else {
		id = "fake_message_id"
	}
	b, _ := json.Marshal(map[string]string{"name": "projects/" + m[1] + "/messages/" + id})
	writeJSON(w, http.StatusOK, string(b))
}

func fcmError(w http.ResponseWriter, status int, gstatus, msg, fcmCode string) {
	e := map[string]any{"code": status, "message": msg, "status": gstatus}
	if fcmCode != "" {
		e["details"] = []map[string]string{{"@type": "type.googleapis.com/google.firebase.fcm.v1.FcmError", "errorCode": fcmCode}}
	}
	b, _ := json.Marshal(map[string]any{"error": e})
	writeJSON(w, status, string(b))
}
