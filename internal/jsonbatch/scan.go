package jsonbatch

import "bytes"

// The scanners below walk a valid document's bytes without decoding
// them. Each tolerates the end of the input anywhere (returning len(b)),
// so that a document that is not valid after all gives wrong answers, not
// a panic.

// at returns b[i], or 0 past the end.
func at(b []byte, i int) byte {
	if i < len(b) {
		return b[i]
	}
	return 0
}

// skipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string whose quote is b[i]. It
// jumps from quote to quote with bytes.IndexByte (vectorised: a message
// body is most of a batch's bytes) and counts the backslashes before
// each to tell an escaped quote from the closing one.
func skipString(b []byte, i int) int {
	for j := i + 1; j < len(b); j++ {
		q := bytes.IndexByte(b[j:], '"')
		if q < 0 {
			break
		}
		j += q
		n := 0
		for k := j - 1; k > i && b[k] == '\\'; k-- {
			n++
		}
		if n%2 == 0 {
			return j + 1
		}
	}
	return len(b)
}

// skipValue returns the index after the value starting at b[i]. It
// counts brackets instead of recursing, so nesting costs no stack.
func skipValue(b []byte, i int) int {
	if i >= len(b) {
		return len(b)
	}
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(b); j++ {
			switch b[j] {
			case '"':
				j = skipString(b, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return len(b)
	}
	j := i + 1 // a number, true, false or null: up to a delimiter
	for j < len(b) {
		switch b[j] {
		case ',', '}', ']', ' ', '\t', '\r', '\n':
			return j
		}
		j++
	}
	return j
}

// arrayIter walks the elements of an array in order, without a closure
// per array (a walk meets one array per message of a batch).
type arrayIter struct {
	b    []byte
	pos  int // the next element's start; once done, the array's ']'
	k    int // the next element's index
	done bool
}

// iterate returns an iterator over the array whose '[' is b[i].
func iterate(b []byte, i int) arrayIter {
	j := skipSpace(b, i+1)
	return arrayIter{b: b, pos: j, done: j >= len(b) || b[j] == ']'}
}

// next returns the next element's index and span.
func (it *arrayIter) next() (k, start, end int, ok bool) {
	if it.done {
		return 0, 0, 0, false
	}
	k, start = it.k, it.pos
	end = skipValue(it.b, start)
	j := skipSpace(it.b, end)
	if at(it.b, j) == ',' {
		it.pos = skipSpace(it.b, j+1)
	} else {
		it.pos, it.done = j, true
	}
	it.k++
	return k, start, end, true
}

// member returns the start of the value of the member of the object at
// b[i] named name. A valid document names a member once, so the first
// match is the only one.
func member(b []byte, i int, name string) (int, bool) {
	j := skipSpace(b, i+1)
	for at(b, j) == '"' {
		end := skipString(b, j)
		key := b[j:end]
		j = skipSpace(b, end)
		j = skipSpace(b, j+1) // the ':'
		if keyIs(key, name) {
			return j, j < len(b)
		}
		j = skipSpace(b, skipValue(b, j))
		if at(b, j) != ',' {
			break
		}
		j = skipSpace(b, j+1)
	}
	return 0, false
}

// element returns the start of the n-th element of the array at b[i].
func element(b []byte, i, n int) (int, bool) {
	it := iterate(b, i)
	for {
		k, start, _, ok := it.next()
		if !ok {
			return 0, false
		}
		if k == n {
			return start, true
		}
	}
}

// keyIs reports whether the quoted member name key is name ("a" and
// "\u0061" are one name).
func keyIs(key []byte, name string) bool {
	if len(key) < 2 {
		return false
	}
	if bytes.IndexByte(key, '\\') < 0 {
		return string(key[1:len(key)-1]) == name
	}
	return unquote(key) == name
}
