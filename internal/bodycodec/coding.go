package bodycodec

import (
	"errors"
	"fmt"
	"strings"
)

// Coding is one content coding.
type Coding uint8

// The codings Decode reads.
const (
	Identity Coding = iota
	Gzip
	// Deflate is what "deflate" names: the zlib format. Decode reports
	// RawDeflate for a body that is bare deflate data instead.
	Deflate
	RawDeflate
	Zstd
)

// Accepted names the codings Parse accepts, as a 415 answer's
// Accept-Encoding field lists them.
const Accepted = "gzip, deflate, zstd"

// The errors of Parse and Decode; the handler answers them with 415, 400
// and 413.
var (
	ErrUnsupported = errors.New("unsupported content coding")
	ErrCorrupt     = errors.New("corrupt encoded body")
	ErrTooLarge    = errors.New("decoded body is larger than the limit")
)

// Parse reads a request's Content-Encoding field values: none, or
// "identity", is Identity; one of gzip (or x-gzip), deflate and zstd is
// that coding. Several codings applied one over another, or any other
// coding, are ErrUnsupported: no sender's SDK stacks them, and refusing
// is clearer than guessing.
func Parse(values []string) (Coding, error) {
	found := Identity
	for _, v := range values {
		for name := range strings.SplitSeq(v, ",") {
			name = strings.ToLower(strings.TrimSpace(name))
			var c Coding
			switch name {
			case "", "identity":
				continue
			case "gzip", "x-gzip":
				c = Gzip
			case "deflate":
				c = Deflate
			case "zstd":
				c = Zstd
			default:
				return Identity, fmt.Errorf("%w %q", ErrUnsupported, name)
			}
			if found != Identity {
				return Identity, fmt.Errorf("%w: more than one coding (%s)", ErrUnsupported, strings.Join(values, ", "))
			}
			found = c
		}
	}
	return found, nil
}

// String names c as Content-Encoding does.
func (c Coding) String() string {
	switch c {
	case Gzip:
		return "gzip"
	case Deflate, RawDeflate:
		return "deflate"
	case Zstd:
		return "zstd"
	}
	return "identity"
}
