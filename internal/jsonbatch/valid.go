package jsonbatch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"unicode/utf8"
)

// Valid checks that doc is what every function of this package expects,
// under the rules of the handler's body parser: exactly one JSON value
// (whitespace around it allowed), nested no deeper than encoding/json
// accepts, in UTF-8 (RFC 8259 §8.1: decoding would turn distinct invalid
// bytes into one U+FFFD), and with no object naming a member twice
// (parsers differ on which one counts, so a sender could be counted under
// one recipient and delivered to another).
func Valid(doc []byte) error {
	if wellFormed(doc) {
		return nil
	}
	return diagnose(doc)
}

// ErrEmptyDocument is Valid's error for a document of no value: nothing,
// or JSON's white space alone.
var ErrEmptyDocument = errors.New("empty document")

// diagnose is Valid's slow path, for a document wellFormed refused: the
// checks one at a time, to say which rule it breaks (as encoding/json
// says it, for bad syntax).
func diagnose(doc []byte) error {
	switch {
	case len(bytes.Trim(doc, " \t\r\n")) == 0:
		return ErrEmptyDocument
	case !utf8.Valid(doc):
		return errors.New("not UTF-8")
	case !json.Valid(doc):
		var v any
		err := json.Unmarshal(doc, &v) // only to say what is wrong
		if err == nil {
			err = errors.New("not one JSON value")
		}
		return err
	}
	if name, ok := repeatedName(doc); ok {
		return fmt.Errorf("an object names %q twice", name)
	}
	return nil
}

// repeatedName returns a name that some object of raw, one valid JSON
// value, gives to two members ("a" and "\u0061" are one name).
func repeatedName(raw []byte) (string, bool) {
	type level struct {
		object bool
		names  nameSet
	}
	var buf [8]level
	stack, wantName := buf[:0], false
	// push enters a container, reusing the names list a sibling left in
	// its slot: a batch of a thousand messages is a thousand objects, and
	// one list serves them all.
	push := func(object bool) {
		if len(stack) < cap(stack) {
			stack = stack[:len(stack)+1]
		} else {
			stack = append(stack, level{})
		}
		l := &stack[len(stack)-1]
		l.object, l.names.list, l.names.set = object, l.names.list[:0], nil
	}
	for i := 0; i < len(raw); i++ {
		switch raw[i] {
		case '{':
			push(true)
			wantName = true
		case '[':
			push(false)
		case '}', ']':
			stack = stack[:len(stack)-1]
		case ',':
			wantName = stack[len(stack)-1].object
		case '"':
			j := skipString(raw, i)
			if wantName {
				wantName = false
				name := raw[i+1 : j-1]
				if bytes.IndexByte(name, '\\') >= 0 {
					name = []byte(unquote(raw[i:j]))
				}
				if !stack[len(stack)-1].names.add(name) {
					return string(name), true
				}
			}
			i = j - 1
		}
	}
	return "", false
}

// nameSet holds the member names of one object.
type nameSet struct {
	list [][]byte
	set  map[string]struct{} // instead of list, once there are many
}

// add adds name and reports whether it was new.
func (s *nameSet) add(name []byte) bool {
	if s.set == nil {
		for _, n := range s.list {
			if bytes.Equal(n, name) {
				return false
			}
		}
		if len(s.list) < 16 {
			s.list = append(s.list, name)
			return true
		}
		s.set = make(map[string]struct{}, 2*len(s.list))
		for _, n := range s.list {
			s.set[string(n)] = struct{}{}
		}
		s.list = nil
	}
	if _, dup := s.set[string(name)]; dup {
		return false
	}
	s.set[string(name)] = struct{}{}
	return true
}
