package answer

import (
	"crypto/rand"
	"fmt"
	"net/http"
	"strconv"

	"github.com/freqcap/caddy-freqcap/internal/jsonbatch"
)

// The problem style: RFC 9457 problem+json for denials, a JSON reason
// for the rest. The gateway's own shape, for senders that call it
// directly.

func problemDeny(w http.ResponseWriter, _ *http.Request, d *Denial) error {
	retryAfter(w, d)
	return writeJSON(w, d.Status, "application/problem+json", d.Problem)
}

func plainFail(w http.ResponseWriter, _ *http.Request, f *Failure) error {
	return writeJSON(w, f.Status, "application/json", struct {
		Error     string `json:"error"`
		Dimension string `json:"dimension,omitempty"`
		Rule      string `json:"rule,omitempty"`
	}{f.Reason, f.Dimension, f.Rule})
}

// APNs (HTTP/2 provider API): {"reason": "..."} and an apns-id. apns2 and
// node-apn decode the body into a struct of their own, so it has no other
// member. A failure's reason is one APNs documents for that status where
// one fits; a 400 that is not about the payload's size gets "BadRequest",
// which no client takes for a bad device token (it would drop the token).

func apnsDeny(w http.ResponseWriter, r *http.Request, d *Denial) error {
	retryAfter(w, d)
	return apnsAnswer(w, r, http.StatusTooManyRequests, "TooManyRequests")
}

func apnsFail(w http.ResponseWriter, r *http.Request, f *Failure) error {
	reason := "BadRequest"
	switch f.Status {
	case http.StatusRequestEntityTooLarge:
		reason = "PayloadTooLarge"
	case http.StatusServiceUnavailable:
		reason = "ServiceUnavailable"
	}
	return apnsAnswer(w, r, f.Status, reason)
}

func apnsAnswer(w http.ResponseWriter, r *http.Request, status int, reason string) error {
	id := r.Header.Get("apns-id")
	if id == "" {
		id = newUUID()
	}
	w.Header().Set("apns-id", id)
	return writeJSON(w, status, "application/json", struct {
		Reason string `json:"reason"`
	}{reason})
}

// newUUID is a random (version 4) UUID, as APNs makes an apns-id.
func newUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // never fails (crypto/rand)
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}

// FCM HTTP v1: Google's error JSON with an FcmError detail, which is what
// the Admin SDKs classify by (messaging.IsQuotaExceeded in Go,
// messaging/message-rate-exceeded in Node).

type googleError struct {
	Error googleStatus `json:"error"`
}

type googleStatus struct {
	Code    int           `json:"code"`
	Message string        `json:"message"`
	Status  string        `json:"status"`
	Details []googleFcmEr `json:"details"`
}

type googleFcmEr struct {
	Type      string `json:"@type"`
	ErrorCode string `json:"errorCode"`
}

func fcmAnswer(w http.ResponseWriter, status int, message, grpcStatus, errorCode string) error {
	return writeJSON(w, status, "application/json; charset=UTF-8", googleError{googleStatus{
		Code: status, Message: message, Status: grpcStatus,
		Details: []googleFcmEr{{Type: "type.googleapis.com/google.firebase.fcm.v1.FcmError", ErrorCode: errorCode}},
	}})
}

func fcmDeny(w http.ResponseWriter, _ *http.Request, d *Denial) error {
	retryAfter(w, d)
	return fcmAnswer(w, http.StatusTooManyRequests, d.Message, "RESOURCE_EXHAUSTED", "QUOTA_EXCEEDED")
}

func fcmFail(w http.ResponseWriter, _ *http.Request, f *Failure) error {
	if f.Status == http.StatusServiceUnavailable {
		return fcmAnswer(w, f.Status, f.Reason, "UNAVAILABLE", "UNAVAILABLE")
	}
	return fcmAnswer(w, f.Status, f.Reason, "INVALID_ARGUMENT", "INVALID_ARGUMENT")
}

// SendGrid v3: {"errors": [{"field": ..., "message": ...}]}. Its
// X-RateLimit-Reset is a Unix time, not a wait, so the gateway's own
// value is replaced in this style.

type sendgridErrors struct {
	Errors []sendgridError `json:"errors"`
}

type sendgridError struct {
	Field   *string `json:"field"`
	Message string  `json:"message"`
}

func sendgridDeny(w http.ResponseWriter, _ *http.Request, d *Denial) error {
	retryAfter(w, d)
	h := w.Header()
	h.Set("X-RateLimit-Limit", strconv.FormatInt(d.Limit, 10))
	h.Set("X-RateLimit-Remaining", "0")
	h.Set("X-RateLimit-Reset", strconv.FormatInt(d.Now.Unix()+d.RetryAfter, 10))
	if len(d.Entries) == 0 {
		return writeJSON(w, http.StatusTooManyRequests, "application/json", sendgridErrors{[]sendgridError{{Message: d.Message}}})
	}
	// A refused mail: each capped addressee is an error of its own whose
	// field is where it is, as SendGrid names the field of each error
	// it finds in a mail.
	errs := make([]sendgridError, len(d.Entries))
	for i := range d.Entries {
		errs[i] = sendgridError{Field: &d.Entries[i].Path, Message: d.Entries[i].Message}
	}
	return writeJSON(w, http.StatusTooManyRequests, "application/json", sendgridErrors{errs})
}

func sendgridFail(w http.ResponseWriter, _ *http.Request, f *Failure) error {
	e := sendgridError{Message: f.Reason}
	if f.Dimension != "" {
		e.Field = &f.Dimension
	}
	return writeJSON(w, f.Status, "application/json", sendgridErrors{[]sendgridError{e}})
}

// Twilio REST: {"code", "message", "more_info", "status"}, and no "type"
// or "title" members: with those, twilio-node raises a different error
// than RestException.

type twilioError struct {
	Code     int    `json:"code"`
	Message  string `json:"message"`
	MoreInfo string `json:"more_info"`
	Status   int    `json:"status"`
}

func twilioAnswer(w http.ResponseWriter, status, code int, message string) error {
	return writeJSON(w, status, "application/json", twilioError{
		Code: code, Message: message, Status: status,
		MoreInfo: "https://www.twilio.com/docs/errors/" + strconv.Itoa(code),
	})
}

func twilioDeny(w http.ResponseWriter, _ *http.Request, d *Denial) error {
	retryAfter(w, d)
	return twilioAnswer(w, http.StatusTooManyRequests, 20429, "Too Many Requests")
}

func twilioFail(w http.ResponseWriter, _ *http.Request, f *Failure) error {
	code := 20422 // Invalid Parameter
	if f.Status == http.StatusServiceUnavailable {
		code = 20503
	}
	return twilioAnswer(w, f.Status, code, f.Reason)
}

// Web Push (RFC 8030 push services): the status and Retry-After are what
// web-push reads; the body is the short JSON Mozilla's autopush writes.

type webpushError struct {
	Code    int    `json:"code"`
	Error   string `json:"error"`
	Message string `json:"message"`
}

func webpushDeny(w http.ResponseWriter, _ *http.Request, d *Denial) error {
	retryAfter(w, d)
	return writeJSON(w, http.StatusTooManyRequests, "application/json", webpushError{http.StatusTooManyRequests, http.StatusText(http.StatusTooManyRequests), d.Message})
}

func webpushFail(w http.ResponseWriter, _ *http.Request, f *Failure) error {
	return writeJSON(w, f.Status, "application/json", webpushError{f.Status, http.StatusText(f.Status), f.Reason})
}

// Expo push API: a per-device rate limit is an error ticket in a 200
// (its 429 means "retry the whole request later": expo-server-sdk does,
// twice, then throws). A failure is Expo's request error,
// {"errors": [{"code", "message"}]}, which the SDK throws with that code.

func expoDeny(w http.ResponseWriter, _ *http.Request, d *Denial) error {
	retryAfter(w, d)
	out := make([]byte, 0, 16+len(d.Tickets)*160)
	out = append(out, `{"data":`...)
	if d.Single && len(d.Tickets) == 1 {
		out = jsonbatch.AppendCapTicket(out, &d.Tickets[0])
	} else {
		out = append(out, '[')
		for i := range d.Tickets {
			if i > 0 {
				out = append(out, ',')
			}
			out = jsonbatch.AppendCapTicket(out, &d.Tickets[i])
		}
		out = append(out, ']')
	}
	out = append(out, "}\n"...)
	return writeBytes(w, http.StatusOK, "application/json", out)
}

// expoSplice puts a MessageRateExceeded ticket at each dropped
// recipient's place in Expo's positional answer (splice expo).
func expoSplice(status int, body []byte, b *jsonbatch.Batch, capped []jsonbatch.Capped) ([]byte, bool) {
	return jsonbatch.SpliceExpo(status, body, len(b.Entries), capped)
}

type expoErrors struct {
	Errors []expoError `json:"errors"`
}

type expoError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

func expoFail(w http.ResponseWriter, _ *http.Request, f *Failure) error {
	code := "VALIDATION_ERROR"
	if f.Status == http.StatusServiceUnavailable {
		code = "SERVICE_UNAVAILABLE"
	}
	return writeJSON(w, f.Status, "application/json", expoErrors{[]expoError{{code, f.Reason}}})
}
