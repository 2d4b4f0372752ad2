package jsonbatch

import (
	"errors"
	"testing"
)

// reportPerEntry adds ns/entry to a benchmark that handles n entries an op.
func reportPerEntry(b *testing.B, n int) {
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/entry")
}

// BenchmarkExpo500 is the batch drop path of a 500-recipient Expo
// request: enumerate the recipients, resolve a per-message content
// dimension, and drop every tenth.
func BenchmarkExpo500(b *testing.B) {
	doc := expoBatch(500)
	p, title := mustPath(b, "*.to"), mustPath(b, "*.title")
	b.SetBytes(int64(len(doc)))
	b.ReportAllocs()
	for b.Loop() {
		batch, err := p.Enumerate(doc, 1000)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := batch.Resolve(title); err != nil {
			b.Fatal(err)
		}
		drop := make([]int, 0, 50)
		for i := 0; i < len(batch.Entries); i += 10 {
			drop = append(drop, i)
		}
		if _, err := batch.Remove(drop); err != nil {
			b.Fatal(err)
		}
	}
	reportPerEntry(b, 500)
}

func BenchmarkEnumerateExpo500(b *testing.B) {
	doc := expoBatch(500)
	p := mustPath(b, "*.to")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Enumerate(doc, 1000); err != nil {
			b.Fatal(err)
		}
	}
	reportPerEntry(b, 500)
}

func BenchmarkRemoveExpo500(b *testing.B) {
	batch, err := mustPath(b, "*.to").Enumerate(expoBatch(500), 1000)
	if err != nil {
		b.Fatal(err)
	}
	var drop []int
	for i := 0; i < 500; i += 10 {
		drop = append(drop, i)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := batch.Remove(drop); err != nil {
			b.Fatal(err)
		}
	}
	reportPerEntry(b, 500)
}

func BenchmarkSpliceExpo500(b *testing.B) {
	answer := []byte(`{"data":[`)
	for i := range 450 {
		if i > 0 {
			answer = append(answer, ',')
		}
		answer = append(answer, `{"status":"ok","id":"XXXXXXXX-XXXX-XXXX-XXXX-XXXXXXXXXXXX"}`...)
	}
	answer = append(answer, "]}"...)
	var capped []Capped
	for i := 0; i < 500; i += 10 {
		capped = append(capped, Capped{Position: i, Rule: "burst", RetryAfter: 59})
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := SpliceExpo(200, answer, 500, capped); !ok {
			b.Fatal("not spliced")
		}
	}
	reportPerEntry(b, 500)
}

// BenchmarkRefuse100k is the cost of answering 413 to a 100,000-message
// Expo batch with max_batch 1000.
func BenchmarkRefuse100k(b *testing.B) {
	doc := expoBatch(100_000)
	p := mustPath(b, "*.to")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Enumerate(doc, 1000); !errors.Is(err, ErrTooMany) {
			b.Fatal(err)
		}
	}
}

// BenchmarkValidExpo500 is the check every JSON body gets before it is
// read, on a 500-recipient Expo batch; /old is the checks it replaced
// (utf8.Valid, encoding/json.Valid, the repeated-name scan), which now
// run only on a refused body.
func BenchmarkValidExpo500(b *testing.B) {
	doc := expoBatch(500)
	b.Run("one_pass", func(b *testing.B) {
		b.SetBytes(int64(len(doc)))
		for b.Loop() {
			if Valid(doc) != nil {
				b.Fatal("refused")
			}
		}
		reportPerEntry(b, 500)
	})
	b.Run("old", func(b *testing.B) {
		b.SetBytes(int64(len(doc)))
		for b.Loop() {
			if diagnose(doc) != nil {
				b.Fatal("refused")
			}
		}
		reportPerEntry(b, 500)
	})
}

// BenchmarkResolveExpo500 is a per-message dimension (the title) of a
// 500-recipient Expo batch.
func BenchmarkResolveExpo500(b *testing.B) {
	batch, err := mustPath(b, "*.to").Enumerate(expoBatch(500), 1000)
	if err != nil {
		b.Fatal(err)
	}
	title := mustPath(b, "*.title")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := batch.Resolve(title); err != nil {
			b.Fatal(err)
		}
	}
	reportPerEntry(b, 500)
}
