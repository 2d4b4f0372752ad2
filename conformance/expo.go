package conformance

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
)

// ExpoSendPath is the path of Expo's push API (https://exp.host/--/api/v2/push/send).
const ExpoSendPath = "/--/api/v2/push/send"

// ExpoReceiptsPath is the path of Expo's receipts API
// (https://exp.host/--/api/v2/push/getReceipts).
const ExpoReceiptsPath = "/--/api/v2/push/getReceipts"

// Expo is a mock of Expo's push API (POST /--/api/v2/push/send) as exp.host
// answers a valid request: a body that is one message object or an array
// of them, each with "to" a push token or an array of tokens, optionally
// compressed (Content-Encoding gzip or deflate, which the SDK uses past
// 1 KB); the answer is 200 {"data": [...]} with one {"status":"ok","id":<uuid>}
// ticket per recipient, in order (the tokens of a "to" array one after
// another). For a body that is a single message object whose "to" is one
// token, data is that one ticket object rather than an array, as exp.host
// answers it. A body it cannot decode or parse gets 400 with Expo's
// {"errors": [...]}.
//
// POST /--/api/v2/push/getReceipts with {"ids": [ticket id, ...]} gets 200
// {"data": {id: receipt}} for the ids it issued (others are left out, as
// Expo leaves out receipts it does not have yet): {"status":"ok"}, or for a
// token that contains "Unregistered" the error receipt Expo gives a
// device that is gone, {"status":"error","message":...,"details":{"error":
// "DeviceNotRegistered"}}.
type Expo struct {
	Recorder
	// GzipResponses compresses answers with gzip when the request accepts
	// it, as exp.host does.
	GzipResponses bool

	mu       sync.Mutex
	calls    []ExpoCall
	receipts []ExpoReceiptsCall
}

// ExpoReceiptsCall is a receipts request the mock answered.
type ExpoReceiptsCall struct {
	Received
	// IDs is the ids asked for, in order.
	IDs []string
	// Found is how many of them it had a receipt for.
	Found int
}

// ReceiptsCalls returns the receipts requests answered so far.
func (e *Expo) ReceiptsCalls() []ExpoReceiptsCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]ExpoReceiptsCall(nil), e.receipts...)
}

// ExpoCall is a request the mock accepted, with what it answered.
type ExpoCall struct {
	Received
	// Recipients is every token of the body in order.
	Recipients []string
	// Tickets is the id of the ticket answered for each recipient.
	Tickets []string
	// Object says the body was a single message object, not an array.
	Object bool
}

// Calls returns the accepted requests so far.
func (e *Expo) Calls() []ExpoCall {
	e.mu.Lock()
	defer e.mu.Unlock()
	return append([]ExpoCall(nil), e.calls...)
}

// Recipients returns every recipient the mock accepted, in order.
func (e *Expo) Recipients() []string {
	var all []string
	for _, c := range e.Calls() {
		all = append(all, c.Recipients...)
	}
	return all
}

func (e *Expo) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	got := e.read(r)
	if r.Method == http.MethodPost && r.URL.Path == ExpoReceiptsPath {
		e.serveReceipts(w, r, got)
		return
	}
	if r.Method != http.MethodPost || r.URL.Path != ExpoSendPath {
		expoError(w, http.StatusNotFound, "NOT_FOUND", "no route "+r.Method+" "+r.URL.Path)
		return
	}
	if got.DecodeErr != nil {
		expoError(w, http.StatusBadRequest, "VALIDATION_ERROR", "could not decode the request body: "+got.DecodeErr.Error())
		return
	}
	recipients, object, scalar, err := ExpoRecipients(got.Decoded)
	if err != nil {
		expoError(w, http.StatusBadRequest, "VALIDATION_ERROR", err.Error())
		return
	}
	call := ExpoCall{Received: got, Recipients: recipients, Object: object}
	tickets := make([]map[string]string, len(recipients))
	for i := range recipients {
		id := UUID()
		call.Tickets = append(call.Tickets, id)
		tickets[i] = map[string]string{"status": "ok", "id": id}
	}
	e.mu.Lock()
	e.calls = append(e.calls, call)
	e.mu.Unlock()

	var data any = tickets
	if object && scalar {
		data = tickets[0]
	}
	body, _ := json.Marshal(map[string]any{"data": data})
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	if e.GzipResponses && acceptsGzip(r) {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(body)
		zw.Close()
		body = buf.Bytes()
		w.Header().Set("Content-Encoding", "gzip")
		w.Header().Set("Vary", "Accept-Encoding")
	}
	w.WriteHeader(http.StatusOK)
	w.Write(body)
}

func (e *Expo) serveReceipts(w http.ResponseWriter, r *http.Request, got Received) {
	if got.DecodeErr != nil {
		expoError(w, http.StatusBadRequest, "VALIDATION_ERROR", "could not decode the request body: "+got.DecodeErr.Error())
		return
	}
	var req struct {
		IDs []string `json:"ids"`
	}
	if err := json.Unmarshal(got.Decoded, &req); err != nil || req.IDs == nil {
		expoError(w, http.StatusBadRequest, "VALIDATION_ERROR", `"ids" must be an array of ticket ids`)
		return
	}
	// The recipient of every ticket issued so far.
	e.mu.Lock()
	issued := map[string]string{}
	for _, c := range e.calls {
		for i, id := range c.Tickets {
			issued[id] = c.Recipients[i]
		}
	}
	e.mu.Unlock()
	data := map[string]any{}
	for _, id := range req.IDs {
		to, ok := issued[id]
		switch {
		case !ok:
		case strings.Contains(to, "Unregistered"):
			data[id] = map[string]any{
				"status":  "error",
				"message": `"` + to + `" is not a registered push notification recipient`,
				"details": map[string]string{"error": "DeviceNotRegistered"},
			}
		default:
			data[id] = map[string]string{"status": "ok"}
		}
	}
	e.mu.Lock()
	e.receipts = append(e.receipts, ExpoReceiptsCall{Received: got, IDs: req.IDs, Found: len(data)})
	e.mu.Unlock()
	body, _ := json.Marshal(map[string]any{"data": data})
	writeJSON(w, http.StatusOK, string(body))
}

// ExpoRecipients reads an Expo push request body: every recipient in order,
// whether the body is one message object, and whether that object's "to"
// is a single token.
func ExpoRecipients(body []byte) (recipients []string, object, scalar bool, err error) {
	body = bytes.TrimSpace(body)
	var msgs []map[string]json.RawMessage
	switch {
	case len(body) > 0 && body[0] == '{':
		var m map[string]json.RawMessage
		if err := json.Unmarshal(body, &m); err != nil {
			return nil, false, false, fmt.Errorf("the body is not JSON: %v", err)
		}
		msgs, object = []map[string]json.RawMessage{m}, true
	default:
		if err := json.Unmarshal(body, &msgs); err != nil {
			return nil, false, false, fmt.Errorf("the body is neither a message nor an array of messages: %v", err)
		}
	}
	for i, m := range msgs {
		raw, ok := m["to"]
		if !ok {
			return nil, false, false, fmt.Errorf(`message %d: "to" is required`, i)
		}
		var one string
		if err := json.Unmarshal(raw, &one); err == nil {
			recipients = append(recipients, one)
			scalar = true
			continue
		}
		var many []string
		if err := json.Unmarshal(raw, &many); err != nil || len(many) == 0 {
			return nil, false, false, fmt.Errorf(`message %d: "to" must be a push token or a non-empty array of them`, i)
		}
		recipients = append(recipients, many...)
		scalar = false
	}
	return recipients, object, scalar, nil
}

func expoError(w http.ResponseWriter, status int, code, msg string) {
	b, _ := json.Marshal(map[string]any{"errors": []map[string]string{{"code": code, "message": msg}}})
	writeJSON(w, status, string(b))
}

func acceptsGzip(r *http.Request) bool {
	for _, part := range strings.Split(r.Header.Get("Accept-Encoding"), ",") {
		name, q, _ := strings.Cut(strings.TrimSpace(part), ";")
		if strings.EqualFold(strings.TrimSpace(name), "gzip") && strings.ReplaceAll(q, " ", "") != "q=0" {
			return true
		}
	}
	return false
}
