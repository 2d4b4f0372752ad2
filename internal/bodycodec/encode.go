package bodycodec

import (
	"bytes"
	"fmt"
	"io"
	"sync"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
)

// Encode returns plain encoded in c, at the fastest level of each coding:
// a body is re-encoded only because the gateway removed entries from it,
// on its way to an upstream a hop away, so time matters more than bytes.
func Encode(c Coding, plain []byte) ([]byte, error) {
	var pool *sync.Pool
	switch c {
	case Identity:
		return plain, nil
	case Zstd:
		return zstdEncoder().EncodeAll(plain, make([]byte, 0, len(plain)/2+64)), nil
	case Gzip:
		pool = &gzipWriters
	case Deflate:
		pool = &zlibWriters
	case RawDeflate:
		pool = &flateWriters
	default:
		return nil, fmt.Errorf("%w: coding %d", ErrUnsupported, c)
	}
	var buf bytes.Buffer
	buf.Grow(len(plain)/2 + 64)
	w := pool.Get().(resettableWriter)
	w.Reset(&buf)
	_, err := w.Write(plain)
	if err == nil {
		err = w.Close()
	}
	pool.Put(w)
	if err != nil {
		return nil, fmt.Errorf("encoding %s: %w", c, err)
	}
	return buf.Bytes(), nil
}

// resettableWriter is what gzip, zlib and flate writers have in common.
type resettableWriter interface {
	io.WriteCloser
	Reset(io.Writer)
}

// The pools of writers; the levels are valid, so New cannot fail.
var (
	gzipWriters = sync.Pool{New: func() any {
		w, _ := gzip.NewWriterLevel(io.Discard, gzip.BestSpeed)
		return w
	}}
	zlibWriters = sync.Pool{New: func() any {
		w, _ := zlib.NewWriterLevel(io.Discard, zlib.BestSpeed)
		return w
	}}
	flateWriters = sync.Pool{New: func() any {
		w, _ := flate.NewWriter(io.Discard, flate.BestSpeed)
		return w
	}}
)

// zstdEncoder is one encoder for every body: EncodeAll may be called
// concurrently.
var zstdEncoder = sync.OnceValue(func() *zstd.Encoder {
	e, _ := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest))
	return e
})
