package bodycodec

import (
	"bytes"
	"errors"
	"runtime"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// windowFrame is a zstd frame of no content that declares a window of
// 2^exp bytes: magic, a header with a window descriptor and no content
// size, and one empty last raw block.
func windowFrame(exp byte) []byte {
	return []byte{0x28, 0xb5, 0x2f, 0xfd, 0x00, (exp - 10) << 3, 0x01, 0x00, 0x00}
}

// A zstd body's decoding allocates what it decodes to, never the window
// its frame declares: sixteen concurrent bodies of nine bytes, each
// declaring the 8 MiB window RFC 9659 allows, allocate well under one
// window in all (a streaming decoder allocated 8 MiB each). The window is
// still accepted, a larger one refused, and a real 8 MiB-window body
// decodes. Allocation is counted (TotalAlloc), not the heap after a GC:
// pooled decoders keep their buffers.
func TestZstdWindowCostsWhatItHolds(t *testing.T) {
	frame := windowFrame(23)
	if out, _, err := Decode(Zstd, frame, 1<<20); err != nil || len(out) != 0 {
		t.Fatalf("an 8 MiB window: %q, %v", out, err)
	}
	if _, _, err := Decode(Zstd, windowFrame(24), 1<<20); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("a 16 MiB window: %v; want ErrCorrupt", err)
	}

	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for range 4 {
				if _, _, err := Decode(Zstd, frame, 1<<20); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 4<<20 {
		t.Errorf("64 decodes of a 9-byte body allocated %d MiB", got>>20)
	}

	content := bytes.Repeat([]byte(`{"to":"a","body":"hello"} `), 40_000) // about 1 MiB
	enc, err := zstd.NewWriter(nil, zstd.WithWindowSize(8<<20))
	if err != nil {
		t.Fatal(err)
	}
	out, _, err := Decode(Zstd, enc.EncodeAll(content, nil), 2<<20)
	if err != nil || !bytes.Equal(out, content) {
		t.Fatalf("an 8 MiB-window body of %d bytes: %d bytes back, %v", len(content), len(out), err)
	}
	if _, _, err := Decode(Zstd, enc.EncodeAll(content, nil), 1<<19); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("past the limit: %v; want ErrTooLarge", err)
	}
}

// A corrupt zstd body is answered at once, in the buffer its first try
// took: only the decoder's words for a block that did not fit the room
// left make the buffer grow (see outgrew). A hundred small corrupt bodies
// allocate under a MiB in all (growing on every error, each took over
// 200 KB).
func TestCorruptZstdCostsWhatItTook(t *testing.T) {
	enc, _ := Encode(Zstd, []byte(`{"to":"ExponentPushToken[xxxxxxxxxxxxxxxxxxxxxx]","body":"hello"}`))
	bad := bytes.Clone(enc)
	for i := 8; i < len(bad); i++ { // past the magic and the frame header
		bad[i] ^= 0x5a
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for range 100 {
		if _, _, err := Decode(Zstd, bad, 1<<20); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("a corrupt body: %v; want ErrCorrupt", err)
		}
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 1<<20 {
		t.Errorf("100 decodes of a corrupt %d-byte body allocated %d KiB", len(bad), got>>10)
	}
}
