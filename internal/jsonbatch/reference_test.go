package jsonbatch

// A reference implementation of this package's semantics on decoded
// values (encoding/json with UseNumber), written without the byte
// scanners, for the fuzz tests to compare against.

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strconv"
	"strings"
)

// decode decodes one JSON value, numbers as written.
func decode(raw []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	err := dec.Decode(&v)
	return v, err
}

// refValue renders v as {json.<path>} does.
func refValue(v any) Value {
	switch x := v.(type) {
	case nil:
		return Value{}
	case string:
		return Value{Text: x, Kind: String}
	case json.Number:
		return Value{Text: string(x), Kind: Number}
	case bool:
		return Value{Text: strconv.FormatBool(x), Kind: Bool}
	}
	out, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	if _, ok := v.(map[string]any); ok {
		return Value{Text: string(out), Kind: Object}
	}
	return Value{Text: string(out), Kind: Array}
}

// refEntry is what the reference finds: a value (or a miss) at a path.
type refEntry struct {
	path    string
	indices []int
	value   any
	missing bool
}

// refPath renders pattern with its wildcards replaced by idx, and one
// more index at the end if idx has one more than pattern has wildcards.
func refPath(pattern []string, idx []int) string {
	out := slices.Clone(pattern)
	k := 0
	for i, s := range out {
		if s == "*" && k < len(idx) {
			out[i] = strconv.Itoa(idx[k])
			k++
		}
	}
	if k < len(idx) {
		out = append(out, strconv.Itoa(idx[k]))
	}
	return strings.Join(out, ".")
}

// refEnumerate walks v along pattern as Enumerate walks bytes; expand
// says whether an array at the end yields its elements.
func refEnumerate(v any, pattern []string, expand bool) []refEntry {
	var out []refEntry
	var walk func(v any, i int, idx []int)
	add := func(idx []int, v any, missing bool) {
		idx = slices.Clone(idx)
		out = append(out, refEntry{path: refPath(pattern, idx), indices: idx, value: v, missing: missing})
	}
	walk = func(v any, i int, idx []int) {
		if i == len(pattern) {
			a, isArray := v.([]any)
			switch {
			case v == nil:
				add(idx, nil, true)
			case isArray && expand:
				for k, e := range a {
					add(append(idx, k), e, e == nil)
				}
			default:
				add(idx, v, false)
			}
			return
		}
		seg := pattern[i]
		if seg == "*" {
			a, ok := v.([]any)
			if !ok {
				add(idx, nil, true)
				return
			}
			for k, e := range a {
				walk(e, i+1, append(slices.Clip(idx), k))
			}
			return
		}
		switch x := v.(type) {
		case map[string]any:
			if e, ok := x[seg]; ok {
				walk(e, i+1, idx)
				return
			}
		case []any:
			if n, err := strconv.Atoi(seg); err == nil && n >= 0 && n < len(x) {
				walk(x[n], i+1, idx)
				return
			}
		}
		add(idx, nil, true)
	}
	walk(v, 0, nil)
	return out
}

// refRemove removes from v (in place, and returns it) the entries whose
// index tuples are in drops, as Remove does. It also returns the paths of
// the outermost elements removed, each as the list of keys leading to it
// (member names and decimal indices), for spansOf.
func refRemove(v any, pattern []string, drops [][]int) (any, [][]string) {
	var wild []int
	for i, s := range pattern {
		if s == "*" {
			wild = append(wild, i)
		}
	}
	var removed [][]string
	// level removes drops (sharing their first L indices) from the array
	// at level L below v, whose keys are keys; it reports whether the
	// array ended empty.
	var level func(v any, keys []string, L int, drops [][]int) (any, bool, [][]string)
	level = func(v any, keys []string, L int, drops [][]int) (any, bool, [][]string) {
		start, end := 0, len(pattern)
		if L > 0 {
			start = wild[L-1] + 1
		}
		if L < len(wild) {
			end = wild[L]
		}
		var gone [][]string
		var emptied bool
		var update func(v any, keys []string, segs []string) any
		update = func(v any, keys []string, segs []string) any {
			if len(segs) > 0 {
				switch x := v.(type) {
				case map[string]any:
					x[segs[0]] = update(x[segs[0]], append(slices.Clip(keys), segs[0]), segs[1:])
					return x
				case []any:
					n, _ := strconv.Atoi(segs[0])
					x[n] = update(x[n], append(slices.Clip(keys), strconv.Itoa(n)), segs[1:])
					return x
				}
				panic("reference: drop not in the document")
			}
			a := v.([]any)
			kept := []any{}
			for k, e := range a {
				var ds [][]int
				for _, d := range drops {
					if d[L] == k {
						ds = append(ds, d)
					}
				}
				ekeys := append(slices.Clip(keys), strconv.Itoa(k))
				if len(ds) == 0 {
					kept = append(kept, e)
					continue
				}
				if len(ds[0]) == L+1 {
					gone = append(gone, ekeys)
					continue
				}
				ne, empty, inner := level(e, ekeys, L+1, ds)
				if empty {
					gone = append(gone, ekeys)
					continue
				}
				gone = append(gone, inner...)
				kept = append(kept, ne)
			}
			emptied = len(kept) == 0
			return kept
		}
		v = update(v, keys, pattern[start:end])
		return v, emptied, gone
	}
	if len(drops) == 0 || len(drops[0]) == 0 {
		return v, nil
	}
	v, _, removed = level(v, nil, 0, drops)
	return v, removed
}

// spansOf returns the byte span of every value in the valid document doc,
// keyed by the keys leading to it joined with "\x00", found with
// encoding/json's tokenizer rather than this package's scanners.
func spansOf(doc []byte) map[string]span {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	type frame struct {
		object bool
		key    string // the current member's name
		named  bool   // key is read and its value not yet
		next   int    // the next element's index
		keys   []string
		start  int
	}
	spans := map[string]span{}
	var stack []*frame
	startAt := func() int { // the next value's first byte
		i := int(dec.InputOffset())
		for i < len(doc) && strings.IndexByte(" \t\r\n,:", doc[i]) >= 0 {
			i++
		}
		return i
	}
	keysOfNext := func() []string {
		if len(stack) == 0 {
			return nil
		}
		f := stack[len(stack)-1]
		if f.object {
			return append(slices.Clip(f.keys), f.key)
		}
		f.next++
		return append(slices.Clip(f.keys), strconv.Itoa(f.next-1))
	}
	for {
		start := startAt()
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return spans
		}
		if err != nil {
			panic(err)
		}
		top := len(stack) - 1
		if d, ok := tok.(json.Delim); ok && (d == '}' || d == ']') {
			f := stack[top]
			spans[strings.Join(f.keys, "\x00")] = span{f.start, int(dec.InputOffset())}
			stack = stack[:top]
			continue
		}
		if top >= 0 && stack[top].object && !stack[top].named {
			stack[top].key, stack[top].named = tok.(string), true
			continue
		}
		if top >= 0 && stack[top].object {
			stack[top].named = false
		}
		keys := keysOfNext()
		if d, ok := tok.(json.Delim); ok {
			stack = append(stack, &frame{object: d == '{', keys: keys, start: start})
			continue
		}
		spans[strings.Join(keys, "\x00")] = span{start, int(dec.InputOffset())}
	}
}
