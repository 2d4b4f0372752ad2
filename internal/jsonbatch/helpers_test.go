package jsonbatch

import (
	"fmt"
	"strings"
	"testing"
)

// mustPath parses s or fails the test.
func mustPath(t testing.TB, s string) *Path {
	t.Helper()
	p, err := ParsePath(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// mustBatch checks doc with Valid and enumerates path in it.
func mustBatch(t testing.TB, path, doc string) *Batch {
	t.Helper()
	if err := Valid([]byte(doc)); err != nil {
		t.Fatalf("document %s: %v", doc, err)
	}
	b, err := mustPath(t, path).Enumerate([]byte(doc), 0)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// describe renders b's entries one a line as
// "path [indices] raw -> kind:text" and its misses as "missing path [indices]".
func describe(b *Batch) []string {
	var out []string
	for i, e := range b.Entries {
		out = append(out, fmt.Sprintf("%s %v %s -> %s:%s",
			b.EntryPath(i), e.Indices, b.Doc[e.Start:e.End], e.Kind, e.Text))
	}
	for _, m := range b.Missing {
		out = append(out, fmt.Sprintf("missing %s %v", m.Path, m.Indices))
	}
	return out
}

// entryIndex returns the position in b.Entries of the entry named path.
func entryIndex(t testing.TB, b *Batch, path string) int {
	t.Helper()
	for i := range b.Entries {
		if b.EntryPath(i) == path {
			return i
		}
	}
	t.Fatalf("no entry %s among %s", path, strings.Join(describe(b), "; "))
	return -1
}
