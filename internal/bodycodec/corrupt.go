package bodycodec

import (
	"errors"
	"io"
	"strings"
)

// errDataAfterEnd is what follows a deflate stream that should end the
// body.
var errDataAfterEnd = errors.New("data after the end of the stream")

// corruptError is a body that does not decode as its coding. Its message
// names the coding once, then what the decoder found, without the
// decoder's own prefix ("not valid gzip: invalid header", where the
// decoder said "gzip: invalid header"), so that a 400's reason reads as a
// sentence. errors.Is finds ErrCorrupt, and the decoder's error.
type corruptError struct {
	coding Coding
	err    error
}

func (e *corruptError) Error() string {
	return "not valid " + e.coding.String() + ": " + detail(e.err)
}

// Is makes errors.Is(err, ErrCorrupt) true.
func (e *corruptError) Is(target error) bool { return target == ErrCorrupt }

func (e *corruptError) Unwrap() error { return e.err }

func corrupt(c Coding, err error) error { return &corruptError{coding: c, err: err} }

// decoderPrefixes are what the decoders start their messages with.
var decoderPrefixes = []string{"gzip: ", "flate: ", "zlib: ", "zstd: "}

// detail is what a decoder's error says, without the decoder's prefix;
// a body that stops short says so in words.
func detail(err error) string {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return "the data ends early"
	}
	msg := err.Error()
	for _, p := range decoderPrefixes {
		msg = strings.TrimPrefix(msg, p)
	}
	return msg
}
