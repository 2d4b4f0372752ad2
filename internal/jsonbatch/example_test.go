package jsonbatch_test

import (
	"fmt"

	"github.com/freqcap/caddy-freqcap/internal/jsonbatch"
)

// An Expo batch under batch drop: the second message's only recipient
// and one recipient of the first are capped.
func Example() {
	doc := []byte(`[{"to": ["alice", "bob"], "title": "Sale"}, {"to": "carol", "title": "Sale"}]`)
	if err := jsonbatch.Valid(doc); err != nil {
		panic(err)
	}
	path, _ := jsonbatch.ParsePath("*.to")
	batch, err := path.Enumerate(doc, 1000)
	if err != nil {
		panic(err)
	}
	for i, e := range batch.Entries {
		fmt.Println(batch.EntryPath(i), e.Text)
	}

	removal, _ := batch.Remove([]int{1, 2})
	header, _ := jsonbatch.SFStringList(removal.Dropped)
	fmt.Printf("%s\nFrequency-Cap-Dropped: %s\n", removal.Body, header)

	answer := []byte(`{"data":[{"status":"ok","id":"A"}]}`)
	spliced, ok := jsonbatch.SpliceExpo(200, answer, len(batch.Entries), []jsonbatch.Capped{
		{Position: 1, Rule: "burst", RetryAfter: 59},
		{Position: 2, Rule: "daily", RetryAfter: 3600},
	})
	fmt.Println(ok, len(spliced) > len(answer))
	// Output:
	// 0.to.0 alice
	// 0.to.1 bob
	// 1.to carol
	// [{"to": ["alice"], "title": "Sale"}]
	// Frequency-Cap-Dropped: "0.to.1", "1.to"
	// true true
}
