// Package answer writes the answers the gateway gives itself (a denial, or
// a 400, 413, 415 or 503 about the request) in the shape a push
// provider's own API gives them, so that the provider's SDK in front of
// the gateway reports a capped send as the rate-limit error it already
// handles. Every shape lives in one table, styles; the handler picks a
// Style once, at provision, and calls it.
package answer

import (
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/jsonbatch"
)

// Denial is what a style needs to answer a refused send. The quota
// fields (RateLimit, X-RateLimit-*) are already set on the response.
type Denial struct {
	// Status is the handler's status_code, used by the problem style.
	Status int
	// Rule is the rule that refused the send (of a batch, its worst
	// denied entry), Limit its limit, RetryAfter seconds until it
	// admits (at least 1).
	Rule       string
	Limit      int64
	RetryAfter int64
	// Message is one sentence for people: which rule, its limit and
	// window, when to retry.
	Message string
	// Problem is the problem+json body (the problem style's).
	Problem any
	// Tickets holds one capped recipient per recipient of the request,
	// in order, for the styles that answer one error per recipient
	// (DenialIsTicket): Expo's tickets, gorush's failed-push logs.
	Tickets []jsonbatch.Capped
	// Batch is the refused batch whose entries Tickets' positions are,
	// or nil for a send that is not a batch. gorush's logs name each
	// recipient and its notification from it.
	Batch *jsonbatch.Batch
	// Entries lists a refused batch's denied entries, in body order, for
	// the styles that name each one in an error of its own (SendGrid's
	// errors, each with its field); nil for a single send.
	Entries []DeniedEntry
	// Single is set when the request was one message as an object, not
	// an array: Expo then answers one ticket, not an array of them.
	Single bool
	// Now is when the decision was made, for the fields that carry a
	// time rather than a wait (SendGrid's X-RateLimit-Reset).
	Now time.Time
}

// DeniedEntry is one denied recipient entry of a refused batch.
type DeniedEntry struct {
	// Path is the entry's path in the body
	// ("personalizations.0.to.1.email").
	Path string
	// Message is one sentence for people, as Denial.Message for the
	// entry's own rule.
	Message string
}

// Failure is an answer about the request itself: it could not be
// decided (400, 413, 415), or the store failed under on_error deny (503).
type Failure struct {
	Status int
	Reason string
	// Dimension and Rule name what the reason is about, when it is.
	Dimension, Rule string
}

// Style is one way of writing answers.
type Style struct {
	// Name is the style's name in the Caddyfile and JSON (answer <name>).
	Name string
	// DenialIsTicket is set when a denial is answered with one error
	// per recipient in a 200 (Expo's tickets, gorush's failed-push
	// logs), rather than an error.
	DenialIsTicket bool
	// ResetIsTime is set when the provider's X-RateLimit-Reset is a Unix
	// time rather than seconds to wait (SendGrid's): the gateway's quota
	// fields then write it so on every answer, admitted ones included.
	ResetIsTime bool
	deny        func(w http.ResponseWriter, r *http.Request, d *Denial) error
	fail        func(w http.ResponseWriter, r *http.Request, f *Failure) error
	// splice, when set, reports dropped entries in the upstream's own
	// answer to the batch without them (see Splice).
	splice func(status int, body []byte, b *jsonbatch.Batch, capped []jsonbatch.Capped) ([]byte, bool)
}

// Deny writes the answer to a refused send.
func (s *Style) Deny(w http.ResponseWriter, r *http.Request, d *Denial) error {
	return s.deny(w, r, d)
}

// Fail writes the answer to a request the gateway could not decide. A 415
// also names, in Accept-Encoding, the codings the gateway reads (RFC 9110,
// section 15.5.16).
func (s *Style) Fail(w http.ResponseWriter, r *http.Request, f *Failure, acceptEncoding string) error {
	if f.Status == http.StatusUnsupportedMediaType && acceptEncoding != "" {
		w.Header().Set("Accept-Encoding", acceptEncoding)
	}
	return s.fail(w, r, f)
}

// Splices reports whether the style answers for the entries batch drop
// removed inside the upstream's answer (Splice), as Expo and gorush
// report a recipient they refused.
func (s *Style) Splices() bool { return s.splice != nil }

// Splice rewrites the upstream's answer (status, body) to b without the
// capped entries so that it reports them too, in the provider's own
// terms. ok is false, and body is returned unchanged, when the answer is
// not the provider's success answer the rewrite expects; the caller
// passes it on and counts it. Only for a style that Splices.
func (s *Style) Splice(status int, body []byte, b *jsonbatch.Batch, capped []jsonbatch.Capped) (out []byte, ok bool) {
	return s.splice(status, body, b, capped)
}

// Default is the style used when none is configured.
const Default = "problem"

// styles is every style, by name: the one place a provider's error shape
// is written down.
var styles = map[string]*Style{
	"problem":  {deny: problemDeny, fail: plainFail},
	"apns":     {deny: apnsDeny, fail: apnsFail},
	"fcm":      {deny: fcmDeny, fail: fcmFail},
	"sendgrid": {deny: sendgridDeny, fail: sendgridFail, ResetIsTime: true},
	"twilio":   {deny: twilioDeny, fail: twilioFail},
	"webpush":  {deny: webpushDeny, fail: webpushFail},
	"expo":     {deny: expoDeny, fail: expoFail, DenialIsTicket: true, splice: expoSplice},
	"gorush":   {deny: gorushDeny, fail: gorushFail, DenialIsTicket: true, splice: gorushSplice},
}

func init() {
	for name, s := range styles {
		s.Name = name
	}
}

// Lookup returns the style of that name.
func Lookup(name string) (*Style, bool) {
	s, ok := styles[name]
	return s, ok
}

// Names lists every style's name, sorted.
func Names() []string {
	names := make([]string, 0, len(styles))
	for n := range styles {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// retryAfter sets Retry-After, which every style keeps.
func retryAfter(w http.ResponseWriter, d *Denial) {
	w.Header().Set("Retry-After", strconv.FormatInt(d.RetryAfter, 10))
}
