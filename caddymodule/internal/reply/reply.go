// Package reply holds what the handler and the support surfaces answer
// and log alike: JSON errors ({"error": ..., "dimension": ..., "rule":
// ...}), a rule's window as text, seconds rounded up, and a request's
// dimension values as a log object.
package reply

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// Failure is an answer the handler gives instead of passing the request
// on: a 400, 413 or 503 with a JSON reason.
type Failure struct {
	Status    int
	Reason    string
	Dimension string
	Rule      string
}

// Write sends f as {"error": ..., "dimension": ..., "rule": ...}: the
// admin API's and console's answers (a send's go through its style: see
// Handler.fail).
func (f *Failure) Write(w http.ResponseWriter) error {
	body := struct {
		Error     string `json:"error"`
		Dimension string `json:"dimension,omitempty"`
		Rule      string `json:"rule,omitempty"`
	}{f.Reason, f.Dimension, f.Rule}
	return JSON(w, f.Status, "application/json", body)
}

// JSON sends v as the whole answer, with the content type given, never
// cached.
func JSON(w http.ResponseWriter, status int, contentType string, v any) error {
	// Not json.Marshal: it writes <, > and & as \u003c..., which reads
	// badly in a reason ("use /frequency_cap/<name>/usage") and guards
	// nothing here (the answers are JSON, never HTML).
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("encoding answer: %w", err)
	}
	out := buf.Bytes() // Encode ends it with a newline
	h := w.Header()
	h.Set("Content-Type", contentType)
	h.Set("Content-Length", strconv.Itoa(len(out)))
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, err := w.Write(out)
	return err
}

// Window names a check's window as configured, with the zone the request
// was actually counted in.
func Window(c *limiter.Check) string {
	if q := c.Rule.Quiet; q != nil {
		return q.String(c.Zone)
	}
	w := c.Rule.Window
	if w.IsCalendar() && c.Zone != nil {
		w.Zone = c.Zone
	}
	return w.String()
}

// CeilSeconds is d in whole seconds, rounded up; 0 for no time.
func CeilSeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}
