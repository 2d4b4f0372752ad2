package jsonbatch

import (
	"errors"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// fuzzSeeds are bodies of the push APIs a batch serves, with paths.
var fuzzSeeds = []struct{ doc, path, other string }{
	{`[{"to":"ExponentPushToken[a]","title":"hi"},{"to":["b","c"],"body":"x"},{"to":"d"}]`, "*.to", "*.title"},
	{"[\n  {\"to\": [\"a\", \"b\"], \"title\": \"x\"},\n  {\"to\": \"c\"}\n]\n", "*.to", "*"},
	{`[{"to":"a"},{"body":"no to"},{"to":null},{"to":["b",null,"c"]},null,{"to":[]}]`, "*.to", "*.body"},
	{`{"notifications":[{"tokens":["t1","t2"],"platform":2,"message":"hi"},{"tokens":[]},{"message":"yo","tokens":["t3"]}]}`, "notifications.*.tokens.*", "notifications.*.message"},
	{`{"notifications":[{"tokens":["t1",null],"message":{"b":1,"a":"\u00e9"}}]}`, "notifications.*.tokens", "notifications.*.message"},
	{`{"app_id":"x","include_subscription_ids":["s1","s2","s3"],"contents":{"en":"Hello"}}`, "include_subscription_ids", "contents"},
	{`{"personalizations":[{"to":[{"email":"a@x","name":"A"},{"email":"b@x"}],"subject":"s"},{"to":[{"email":"c@x"}]}],"from":{"email":"f@x"}}`, "personalizations.*.to.*.email", "personalizations.*.to.*.name"},
	{`{"registration_ids":["r1","r2","r3"],"data":{"k":"v"}}`, "registration_ids", "data.k"},
	{`{"registration_ids":"r1"}`, "registration_ids", "data"},
	{`{"ids":[12, -1.50e+3, true, "a\u0062\"c\\", ["x", ["y"]], {"z":[1]}, []] , "n" : 1E2}`, "ids.*", "n"},
	{`[[["a","b"],["c"]],[[]],[["d"]]]`, "*.*", "*.0"},
	{` [ { "t\u006f" : "a" } , { "to" : [ "b" ] } ] `, "*.to", "*.x"},
}

// FuzzEnumerate compares Enumerate and Resolve with the reference walk of
// the decoded document: the same entries and misses, in the same order,
// with the same paths, indices and values, and spans whose bytes decode
// to the entry's value. Documents that Valid refuses must not panic.
func FuzzEnumerate(f *testing.F) {
	for _, s := range fuzzSeeds {
		f.Add([]byte(s.doc), s.path, s.other)
	}
	f.Fuzz(func(t *testing.T, doc []byte, path, other string) {
		p, err := ParsePath(path)
		if err != nil || hasFilter(path) {
			return // the reference walks know no wildcard filter
		}
		q, qerr := ParsePath(other)
		b, err := p.Enumerate(doc, 1<<20)
		if Valid(doc) != nil {
			if err == nil && qerr == nil {
				b.Resolve(q) // must not panic
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		v, err := decode(doc)
		if err != nil {
			t.Fatal(err)
		}
		pattern := strings.Split(path, ".")
		var want, wantMissing []refEntry
		for _, e := range refEnumerate(v, pattern, true) {
			if e.missing {
				wantMissing = append(wantMissing, e)
			} else {
				want = append(want, e)
			}
		}
		if len(b.Entries) != len(want) || len(b.Missing) != len(wantMissing) {
			t.Fatalf("%s in %s: %d entries and %d misses, want %d and %d:\n%s",
				path, doc, len(b.Entries), len(b.Missing), len(want), len(wantMissing), strings.Join(describe(b), "\n"))
		}
		for i, e := range b.Entries {
			w := want[i]
			if b.EntryPath(i) != w.path || !slices.Equal(e.Indices, w.indices) || e.Value != refValue(w.value) {
				t.Fatalf("%s in %s: entry %d is %s %v %v, want %s %v %v",
					path, doc, i, b.EntryPath(i), e.Indices, e.Value, w.path, w.indices, refValue(w.value))
			}
			got, err := decode(doc[e.Start:e.End])
			if err != nil || !reflect.DeepEqual(got, w.value) {
				t.Fatalf("%s in %s: entry %d spans %q, want the bytes of %v", path, doc, i, doc[e.Start:e.End], w.value)
			}
		}
		for i, m := range b.Missing {
			w := wantMissing[i]
			if m.Path != w.path || !slices.Equal(m.Indices, w.indices) {
				t.Fatalf("%s in %s: miss %d is %s %v, want %s %v", path, doc, i, m.Path, m.Indices, w.path, w.indices)
			}
		}
		if qerr != nil {
			return
		}
		vs, err := b.Resolve(q)
		if p.CheckDimension(q) != nil {
			if err == nil {
				t.Fatalf("resolved %s for %s", other, path)
			}
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		otherPattern := strings.Split(other, ".")
		for i, e := range b.Entries {
			// The other path with its wildcards replaced by the entry's
			// indices names one value, or none.
			concrete := strings.Split(refPath(otherPattern, e.Indices[:q.Wildcards()]), ".")
			var want Value
			if r := refEnumerate(v, concrete, false); len(r) == 1 && !r[0].missing {
				want = refValue(r[0].value)
			}
			if vs[i] != want {
				t.Fatalf("%s for entry %s of %s: %v, want %v", other, b.EntryPath(i), doc, vs[i], want)
			}
		}
	})
}

// FuzzRemove drops a random set of entries and checks the result against
// the reference removal on the decoded document: it is valid JSON, it
// decodes to the input with exactly those entries' elements removed (and
// the emptied enclosing elements), the bytes removed are those elements
// and the commas and whitespace around them and nothing else, the dropped
// paths are listed in body order, and the entries left are those not
// dropped, byte for byte.
func FuzzRemove(f *testing.F) {
	for i, s := range fuzzSeeds {
		f.Add([]byte(s.doc), s.path, uint64(i)*0x9e3779b97f4a7c15)
	}
	f.Fuzz(func(t *testing.T, doc []byte, path string, seed uint64) {
		p, err := ParsePath(path)
		if err != nil || hasFilter(path) {
			return // the reference walks know no wildcard filter
		}
		b, err := p.Enumerate(doc, 1<<20)
		if err != nil {
			return
		}
		rng := rand.New(rand.NewPCG(seed, seed>>32))
		var drop []int
		odds := []float64{0, 0.25, 0.5, 0.9, 1}[seed%5]
		for i := range b.Entries {
			if rng.Float64() < odds {
				drop = append(drop, i)
			}
		}
		rng.Shuffle(len(drop), func(i, j int) { drop[i], drop[j] = drop[j], drop[i] })
		r, err := b.Remove(drop)
		if Valid(doc) != nil {
			return // it did not panic
		}
		if err != nil {
			t.Fatal(err)
		}
		if err := Valid(r.Body); err != nil {
			t.Fatalf("dropping %v of %s from %s gave %s: %v", drop, path, doc, r.Body, err)
		}

		slices.Sort(drop)
		var dropIdx [][]int
		var wantDropped []string
		for _, i := range drop {
			dropIdx = append(dropIdx, b.Entries[i].Indices)
			wantDropped = append(wantDropped, b.EntryPath(i))
		}
		if !slices.Equal(r.Dropped, wantDropped) {
			t.Fatalf("dropped %q, want %q", r.Dropped, wantDropped)
		}
		if r.NothingLeft != (len(drop) == len(b.Entries) && len(drop) > 0) {
			t.Fatalf("nothing left %v with %d of %d dropped", r.NothingLeft, len(drop), len(b.Entries))
		}

		v, _ := decode(doc)
		want, gone := refRemove(v, strings.Split(path, "."), dropIdx)
		got, err := decode(r.Body)
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("dropping %v of %s from %s gave %s, want the meaning of %v", wantDropped, path, doc, r.Body, want)
		}

		// The bytes that went: the removed elements, and whitespace and
		// commas adjacent to them (through other whitespace and commas).
		spans := spansOf(doc)
		mustGo := make([]bool, len(doc))
		for _, keys := range gone {
			s, ok := spans[strings.Join(keys, "\x00")]
			if !ok {
				t.Fatalf("no span for %q", keys)
			}
			for i := s.start; i < s.end; i++ {
				mustGo[i] = true
			}
		}
		sep := func(c byte) bool { return strings.IndexByte(" \t\r\n,", c) >= 0 }
		mayGo := slices.Clone(mustGo)
		for i := 0; i < len(doc); {
			if !sep(doc[i]) {
				i++
				continue
			}
			j := i
			for j < len(doc) && sep(doc[j]) {
				j++
			}
			if (i > 0 && mustGo[i-1]) || (j < len(doc) && mustGo[j]) {
				for k := i; k < j; k++ {
					mayGo[k] = true
				}
			}
			i = j
		}
		// Whitespace or a comma inside a string is no separator, but a
		// deletion there would change the decoded value, caught above.
		in, out := 0, 0
		for in < len(doc) {
			switch {
			case mustGo[in]:
				in++
			case out < len(r.Body) && doc[in] == r.Body[out]:
				in, out = in+1, out+1
			case mayGo[in]:
				in++
			default:
				t.Fatalf("dropping %v from %s gave %s: byte %d (%q) of the input is missing", wantDropped, doc, r.Body, in, doc[in])
			}
		}
		if out != len(r.Body) {
			t.Fatalf("dropping %v from %s gave %s: %q was not in the input", wantDropped, doc, r.Body, r.Body[out:])
		}

		// What is left enumerates to the entries not dropped.
		after, err := p.Enumerate(r.Body, 1<<20)
		if err != nil {
			t.Fatal(err)
		}
		var left []string
		for i, e := range b.Entries {
			if !slices.Contains(drop, i) || len(e.Indices) == 0 {
				left = append(left, string(doc[e.Start:e.End]))
			}
		}
		var gotLeft []string
		for _, e := range after.Entries {
			gotLeft = append(gotLeft, string(r.Body[e.Start:e.End]))
		}
		if !slices.Equal(gotLeft, left) {
			t.Fatalf("after dropping %v from %s: entries %q, want %q", wantDropped, doc, gotLeft, left)
		}
	})
}

func TestFuzzSeedsParse(t *testing.T) {
	for _, s := range fuzzSeeds {
		if err := Valid([]byte(s.doc)); err != nil {
			t.Errorf("seed %s: %v", s.doc, err)
		}
		if _, err := mustPath(t, s.path).Enumerate([]byte(s.doc), 0); errors.Is(err, ErrTooMany) {
			t.Errorf("seed %s: %v", s.doc, err)
		}
	}
}
