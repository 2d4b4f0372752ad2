package caddymodule

import (
	"bytes"
	"net/http"
	"strconv"
)

// maxSpliceAnswer bounds the upstream answer held for splicing; a
// longer one (no ticket list or gorush answer is near it) is passed on as
// it comes, not spliced.
const maxSpliceAnswer = 4 << 20

// spliceWriter holds the upstream's answer to a batch whose dropped
// entries are spliced back into it (splice expo, answer gorush under
// batch drop): the answer can be rewritten only whole. The headers go to the client's writer as
// the upstream sets them; the status and body wait for finish.
type spliceWriter struct {
	http.ResponseWriter
	status int
	buf    bytes.Buffer
	// passing is set once the answer outgrew maxSpliceAnswer: what was
	// held went out, and the rest goes straight through.
	passing bool
	// refunded tells the statuses whose sends are given back: their
	// answer goes out without the gateway's quota fields, own (see
	// statusRecorder).
	refunded func(status int) bool
	own      http.Header
}

// WriteHeader implements http.ResponseWriter; 1xx answers go through.
func (s *spliceWriter) WriteHeader(code int) {
	switch {
	case code < 200:
		s.ResponseWriter.WriteHeader(code)
	case s.status == 0:
		s.final(code)
	}
}

// final records the answer's status.
func (s *spliceWriter) final(code int) {
	s.status = code
	if s.refunded != nil && s.refunded(code) {
		dropOwnQuota(s.Header(), s.own)
	}
}

// Write implements http.ResponseWriter.
func (s *spliceWriter) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.final(http.StatusOK)
	}
	if s.passing {
		return s.ResponseWriter.Write(p)
	}
	if s.buf.Len()+len(p) > maxSpliceAnswer {
		s.passing = true
		s.ResponseWriter.WriteHeader(s.status)
		if _, err := s.ResponseWriter.Write(s.buf.Bytes()); err != nil {
			return 0, err
		}
		s.buf = bytes.Buffer{}
		return s.ResponseWriter.Write(p)
	}
	return s.buf.Write(p)
}

// Flush implements http.Flusher: nothing is sent before finish, unless
// the answer is passing through.
func (s *spliceWriter) Flush() {
	if s.passing {
		_ = http.NewResponseController(s.ResponseWriter).Flush()
	}
}

// Unwrap lets http.ResponseController reach the client's writer.
func (s *spliceWriter) Unwrap() http.ResponseWriter { return s.ResponseWriter }

// bodiless reports whether an answer of this status to this method has
// no body to splice (and must not get a Content-Length of its own).
func bodiless(method string, status int) bool {
	return method == http.MethodHead || status == http.StatusNoContent || status == http.StatusNotModified
}

// finish sends the answer held, spliced when splice can (Expo's: a 2xx
// JSON answer with a data array of the tickets expected; gorush's: a 2xx
// JSON answer with counts and logs), else as it came, and reports
// whether the answer was one splice should have rewritten and could not
// (a failure to count). A bodiless answer (HEAD, 204, 304) goes out as
// it came, counted as nothing.
func (s *spliceWriter) finish(method string, splice func(status int, answer []byte) ([]byte, bool)) (failed bool) {
	if s.passing {
		return true
	}
	if bodiless(method, s.status) {
		s.ResponseWriter.WriteHeader(s.status)
		_, _ = s.ResponseWriter.Write(s.buf.Bytes())
		return false
	}
	out, ok := splice(s.status, s.buf.Bytes())
	s.Header().Set("Content-Length", strconv.Itoa(len(out)))
	if !bytes.Equal(out, s.buf.Bytes()) {
		// Rewritten: the upstream's digests and entity tag name its own
		// answer, not this one.
		dropDigests(s.Header())
		s.Header().Del("Etag")
	}
	s.ResponseWriter.WriteHeader(s.status)
	_, _ = s.ResponseWriter.Write(out)
	return !ok
}
