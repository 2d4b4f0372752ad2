package caddymodule

import (
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// statusMatch matches a status code exactly (code) or by class (class 5
// for "5xx").
type statusMatch struct {
	code  int
	class int
}

// parseStatusMatch parses "5xx" or "429". A success is refused: it would
// give back the quota of every send the upstream took, so nothing would
// be capped; so is an informational status, which is never a response's
// final one, so it would never match.
func parseStatusMatch(s string) (statusMatch, error) {
	var m statusMatch
	if len(s) == 3 && strings.EqualFold(s[1:], "xx") && s[0] >= '1' && s[0] <= '5' {
		m.class = int(s[0] - '0')
	} else {
		code, err := strconv.Atoi(s)
		if err != nil || code < 100 || code > 599 {
			return statusMatch{}, fmt.Errorf("refund_on %q: want a status class (5xx) or a code (429)", s)
		}
		m.code = code
	}
	switch m.class + m.code/100 {
	case 1:
		return statusMatch{}, fmt.Errorf("refund_on %q: an informational status is never a response's final one, so it would never refund; name what the upstream answers a send it did not take with (5xx, 429)", s)
	case 2:
		return statusMatch{}, fmt.Errorf("refund_on %q would give back the quota of every send the upstream took, so nothing would be capped; name what it answers a send it did not take with (5xx, 429)", s)
	}
	return m, nil
}

func (m statusMatch) matches(status int) bool {
	if m.class != 0 {
		return status/100 == m.class
	}
	return status == m.code
}

func matchesAny(ms []statusMatch, status int) bool {
	for _, m := range ms {
		if m.matches(status) {
			return true
		}
	}
	return false
}

// statusRecorder passes a response through untouched and remembers its
// final status. Unwrap (from ResponseWriterWrapper) keeps
// http.ResponseController working: hijacking, deadlines, full duplex.
type statusRecorder struct {
	*caddyhttp.ResponseWriterWrapper
	status int
	// refunded, when set, tells the statuses whose send is given back:
	// their answer goes out without the gateway's quota fields (own),
	// which count the send and would hold a client back that the next
	// send is not refused to.
	refunded func(status int) bool
	own      http.Header
}

func newStatusRecorder(w http.ResponseWriter, refunded func(int) bool) *statusRecorder {
	s := &statusRecorder{ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: w}, refunded: refunded}
	if refunded != nil {
		s.own = ownQuota(w.Header())
	}
	return s
}

// WriteHeader implements http.ResponseWriter; 1xx answers are not final.
func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 && code >= 200 {
		s.final(code)
	}
	s.ResponseWriterWrapper.WriteHeader(code)
}

// final records the answer's status, before its header goes out.
func (s *statusRecorder) final(code int) {
	s.status = code
	if s.refunded != nil && s.refunded(code) {
		dropOwnQuota(s.Header(), s.own)
	}
}

// Write implements http.ResponseWriter.
func (s *statusRecorder) Write(p []byte) (int, error) {
	s.implicitOK()
	return s.ResponseWriterWrapper.Write(p)
}

// ReadFrom implements io.ReaderFrom.
func (s *statusRecorder) ReadFrom(r io.Reader) (int64, error) {
	s.implicitOK()
	return s.ResponseWriterWrapper.ReadFrom(r)
}

// Flush implements http.Flusher, which streaming upstreams rely on.
func (s *statusRecorder) Flush() {
	s.implicitOK()
	_ = http.NewResponseController(s.ResponseWriter).Flush()
}

// implicitOK records the 200 that writing without a status means.
func (s *statusRecorder) implicitOK() {
	if s.status == 0 {
		s.final(http.StatusOK)
	}
}

// Interface guards.
var (
	_ http.Flusher  = (*statusRecorder)(nil)
	_ io.ReaderFrom = (*statusRecorder)(nil)
)
