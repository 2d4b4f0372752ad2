package jsonbatch

import (
	"bytes"
	"errors"
	"runtime"
	"strings"
	"testing"
)

// expoBatch returns an Expo body of n messages, each to one recipient.
func expoBatch(n int) []byte {
	var b bytes.Buffer
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`{"to":"ExponentPushToken[xxxxxxxxxxxxxxxxxxxxxx]","title":"Sale","body":"50% off everything until midnight"}`)
	}
	b.WriteByte(']')
	return b.Bytes()
}

// allocated returns the bytes fn allocates.
func allocated(fn func()) uint64 {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	fn()
	runtime.ReadMemStats(&after)
	return after.TotalAlloc - before.TotalAlloc
}

// A batch far over the maximum is refused after max+1 entries: what it
// costs does not grow with the batch.
func TestTooManyEntriesStopsEarly(t *testing.T) {
	p := mustPath(t, "*.to")
	for _, doc := range [][]byte{
		expoBatch(100_000),
		[]byte("[" + strings.Repeat(`{"title":"no to"},`, 100_000) + "{}]"), // misses count too
		[]byte(`{"registration_ids":[` + strings.Repeat(`"r",`, 100_000) + `"r"]}`),
	} {
		path := p
		if doc[0] == '{' {
			path = mustPath(t, "registration_ids")
		}
		var err error
		bytes := allocated(func() { _, err = path.Enumerate(doc, 1000) })
		if !errors.Is(err, ErrTooMany) {
			t.Fatalf("%d bytes: %v, want ErrTooMany", len(doc), err)
		}
		if bytes > 256<<10 {
			t.Errorf("refusing a %d-byte batch allocated %d bytes", len(doc), bytes)
		}
	}
	// Arrays that name nobody cost nothing against the maximum.
	doc := []byte(`{"notifications":[` + strings.Repeat(`{"tokens":[]},`, 100_000) + `{"tokens":["t"]}]}`)
	b, err := mustPath(t, "notifications.*.tokens.*").Enumerate(doc, 1000)
	if err != nil || len(b.Entries) != 1 {
		t.Fatalf("%v, %v", b, err)
	}
}

// Nesting as deep as encoding/json allows costs no recursion: values
// inside it are skipped by counting brackets.
func TestDeepNesting(t *testing.T) {
	deep := strings.Repeat("[", 9990) + `"x"` + strings.Repeat("]", 9990)
	doc := `[{"to":"a"},{"to":` + deep + `},{"to":"b"}]`
	b := mustBatch(t, "*.to", doc)
	if len(b.Entries) != 3 || b.Entries[1].Kind != Array {
		t.Fatalf("%d entries: %v", len(b.Entries), describe(b)[0])
	}
	r, err := b.Remove([]int{1})
	if err != nil || string(r.Body) != `[{"to":"a"},{"to":"b"}]` {
		t.Fatalf("%.80s, %v", r.Body, err)
	}
	r, err = b.Remove([]int{0, 2})
	if err != nil || string(r.Body) != `[{"to":`+deep+`}]` {
		t.Fatalf("%.80s, %v", r.Body, err)
	}
}

// A huge recipient costs its rendered text once, no more.
func TestHugeToken(t *testing.T) {
	token := strings.Repeat("x", 1<<20)
	doc := []byte(`{"registration_ids":["` + token + `","y"]}`)
	p := mustPath(t, "registration_ids")
	var b *Batch
	n := allocated(func() { b, _ = p.Enumerate(doc, 0) })
	if len(b.Entries) != 2 || b.Entries[0].Text != token {
		t.Fatalf("%d entries", len(b.Entries))
	}
	if n > 2<<20+64<<10 {
		t.Errorf("enumerating a %d-byte body allocated %d bytes", len(doc), n)
	}
	r, err := b.Remove([]int{0})
	if err != nil || string(r.Body) != `{"registration_ids":["y"]}` {
		t.Fatalf("%.80s, %v", r.Body, err)
	}
}
