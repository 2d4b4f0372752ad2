package bodycodec

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"

	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zlib"
	"github.com/klauspost/compress/zstd"
)

// maxZstdWindow is the largest zstd window Decode accepts: the 8 MiB that
// RFC 9659 requires of a zstd content coding. A frame asking for more is
// corrupt for HTTP.
const maxZstdWindow = 8 << 20

// maxZstdBlock is the most one zstd block decodes to (RFC 8878,
// 3.1.1.2.3), with the few bytes more the decoder asks of its buffer.
const maxZstdBlock = 128<<10 + 64

// Decode returns src decoded from c, and the coding it found (RawDeflate
// for a "deflate" body that has no zlib header; given RawDeflate, it reads
// raw deflate only). The output is at most
// limit bytes: past that, Decode stops and returns ErrTooLarge. Data that
// does not decode, ends early, or is followed by anything but another
// gzip member, is ErrCorrupt. Identity returns src itself.
func Decode(c Coding, src []byte, limit int64) ([]byte, Coding, error) {
	var (
		r       io.Reader
		release func()
		err     error
	)
	switch c {
	case Identity:
		if int64(len(src)) > limit {
			return nil, c, ErrTooLarge
		}
		return src, c, nil
	case Gzip:
		r, release, err = gzipReader(src)
	case Deflate, RawDeflate:
		if c == RawDeflate || !zlibHeader(src) {
			c = RawDeflate
			r, release = flateReader(src)
			break
		}
		r, release, err = zlibReader(src)
	case Zstd:
		out, err := zstdDecode(src, limit)
		return out, c, err
	default:
		return nil, c, fmt.Errorf("%w: coding %d", ErrUnsupported, c)
	}
	if err != nil {
		return nil, c, corrupt(c, err)
	}
	defer release()
	out, err := readLimited(r, limit, len(src))
	if err != nil {
		if errors.Is(err, ErrTooLarge) {
			return nil, c, err
		}
		if c == Gzip && gzipThenOther(src) {
			// The reader took the bytes after the last member for a
			// member's start, and found it cut short or no header.
			err = errDataAfterEnd
		}
		return nil, c, corrupt(c, err)
	}
	if c == RawDeflate || c == Deflate {
		// flate stops at the final block and zlib at its checksum:
		// bytes after them are not part of the body the sender meant.
		if br, ok := r.(interface{ Len() int }); ok && br.Len() > 0 {
			return nil, c, corrupt(c, errDataAfterEnd)
		}
	}
	return out, c, nil
}

// readLimited reads r to its end into one buffer, first sized for a body
// that expands four times, and fails with ErrTooLarge at limit+1 bytes.
func readLimited(r io.Reader, limit int64, encoded int) ([]byte, error) {
	size := min(int64(encoded)*4+512, limit+1)
	buf := make([]byte, 0, size)
	lr := io.LimitReader(r, limit+1)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := lr.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if int64(len(buf)) > limit {
			return nil, ErrTooLarge
		}
		if err == io.EOF {
			return buf, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// zlibHeader reports whether src starts with a zlib header (RFC 1950):
// method 8 (deflate), a window of at most 32 KiB, and the check bits.
func zlibHeader(src []byte) bool {
	return len(src) >= 2 && src[0]&0x0f == 8 && src[0]>>4 <= 7 && (uint16(src[0])<<8|uint16(src[1]))%31 == 0
}

// The pools of decoders, each reset onto a new source per body.
var gzipPool, zlibPool, flatePool, zstdPool sync.Pool

// gzipThenOther reports whether src is whole gzip members followed by
// bytes that start no member (a newline after the body): data after the
// end, which Decode refuses as the deflate codings' is, rather than data
// cut short. Only a refused body is read so, never past what Decode read.
func gzipThenOther(src []byte) bool {
	br := bytes.NewReader(src)
	zr, err := gzip.NewReader(br)
	for err == nil {
		zr.Multistream(false)
		if _, err = io.Copy(io.Discard, zr); err != nil || br.Len() == 0 {
			return false
		}
		if rest := src[len(src)-br.Len():]; len(rest) < 2 || rest[0] != 0x1f || rest[1] != 0x8b {
			return true
		}
		err = zr.Reset(br)
	}
	return false
}

func gzipReader(src []byte) (io.Reader, func(), error) {
	br := bytes.NewReader(src)
	zr, _ := gzipPool.Get().(*gzip.Reader)
	var err error
	if zr == nil {
		zr, err = gzip.NewReader(br)
	} else {
		err = zr.Reset(br)
	}
	if err != nil {
		return nil, nil, err
	}
	return zr, func() { gzipPool.Put(zr) }, nil
}

// sourced is a decoder together with the reader of its source, so that
// Decode can ask how much of the source is left unread. A bytes.Reader is
// a flate.Reader (an io.ByteReader), so the decoder reads it directly,
// with no buffer ahead, and stops exactly at the end of its stream.
type sourced struct {
	io.Reader
	src *bytes.Reader
}

func (s sourced) Len() int { return s.src.Len() }

func zlibReader(src []byte) (io.Reader, func(), error) {
	br := bytes.NewReader(src)
	zr, _ := zlibPool.Get().(io.ReadCloser)
	var err error
	if zr == nil {
		zr, err = zlib.NewReader(br)
	} else {
		err = zr.(zlib.Resetter).Reset(br, nil)
	}
	if err != nil {
		return nil, nil, err
	}
	return sourced{zr, br}, func() { zlibPool.Put(zr) }, nil
}

func flateReader(src []byte) (io.Reader, func()) {
	br := bytes.NewReader(src)
	fr, _ := flatePool.Get().(io.ReadCloser)
	if fr == nil {
		fr = flate.NewReader(br)
	} else {
		_ = fr.(flate.Resetter).Reset(br, nil)
	}
	return sourced{fr, br}, func() { flatePool.Put(fr) }
}

// zstdDecode decodes src whole (DecodeAll), at most limit bytes, into a
// buffer it may not grow past its capacity: DecodeAll keeps the history
// in the output itself, so what a body costs follows what it decodes to,
// at most limit. (A streaming reader allocates the window a frame
// declares, 8 MiB for a 9-byte body, which sixteen concurrent senders made
// 135 MiB.) The buffer starts at the content size the frame declares, or
// four times the body, and grows fourfold up to limit (and one block past
// it, below) when a frame without a size outgrows it: each try decodes
// again, at most twice the work in all.
func zstdDecode(src []byte, limit int64) ([]byte, error) {
	zr, _ := zstdPool.Get().(*zstd.Decoder)
	var err error
	if zr == nil {
		// Concurrency 1 decodes in the caller's goroutine: a pooled
		// decoder holds no goroutine, so the pool may drop it.
		zr, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxWindow(maxZstdWindow), zstd.WithDecodeAllCapLimit(true))
		if err != nil {
			return nil, corrupt(Zstd, err)
		}
	}
	defer zstdPool.Put(zr)
	// The decoder refuses a window larger than the most it may decode,
	// so that bound is never below the 8 MiB window RFC 9659 allows; the
	// buffer's capacity is what holds a body to limit.
	if err := zr.ResetWithOptions(nil, zstd.WithDecoderMaxMemory(uint64(max(limit+1, maxZstdWindow)))); err != nil {
		return nil, corrupt(Zstd, err)
	}
	size := int64(len(src))*4 + 512
	var h zstd.Header
	if h.Decode(src) == nil && h.HasFCS {
		size = int64(min(h.FrameContentSize, uint64(limit))) + 1
	}
	size = min(size, limit+1)
	for {
		out, err := zr.DecodeAll(src, make([]byte, 0, size))
		switch {
		case int64(len(out)) > limit:
			return nil, ErrTooLarge
		case err == nil:
			return out, nil
		case errors.Is(err, zstd.ErrDecoderSizeExceeded) && size > limit:
			return nil, ErrTooLarge
		case errors.Is(err, zstd.ErrDecoderSizeExceeded):
			size = min(size*4, limit+1)
		case outgrew(err) && size-int64(len(out)) < maxZstdBlock && size <= limit+maxZstdBlock:
			// The room left may be what stopped it. Past the limit there
			// is room for one whole block more, so that a body too large
			// shows it by its length (what decoded before an error is
			// returned) and an error with room to spare is the body's
			// own.
			size = min(size*4, limit+1+maxZstdBlock)
		default:
			return nil, corrupt(Zstd, err)
		}
	}
}

// outgrew reports whether err may be the decoder's way of saying that a
// block did not fit the buffer's room: its assembly decoder says "output
// bigger than max block size" for that, as for a block that is corrupt
// (klauspost/compress 1.20, seqdec_asm.go), where its other paths say
// ErrDecoderSizeExceeded. Other errors are the body's own, answered at
// once: a corrupt body costs no more buffers than it first took.
// TestSmallBodiesOverTheLimit fails if the decoder's words change.
func outgrew(err error) bool {
	return strings.Contains(err.Error(), "bigger than max block size")
}
