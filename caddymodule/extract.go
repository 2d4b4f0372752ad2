package caddymodule

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"
)

// What an expression needs from the request body.
const (
	needJSON = 1 << iota
	needForm
)

// needsOf tells which body placeholders expr uses.
func needsOf(expr string) int {
	n := 0
	if strings.Contains(expr, "{json.") {
		n |= needJSON
	}
	if strings.Contains(expr, "{form.") {
		n |= needForm
	}
	return n
}

// body holds what the body placeholders read from one request.
type body struct {
	json any
	form url.Values
}

// provide answers the {json.<path>} and {form.<field>} placeholders; it is
// a caddy.ReplacerFunc.
func (b *body) provide(key string) (any, bool) {
	switch {
	case strings.HasPrefix(key, "json."):
		if b.json == nil {
			return nil, false
		}
		return lookupJSON(b.json, key[len("json."):])
	case strings.HasPrefix(key, "form."):
		if b.form == nil {
			return nil, false
		}
		vs, ok := b.form[key[len("form."):]]
		if !ok || len(vs) == 0 {
			return nil, false
		}
		return vs[0], true
	}
	return nil, false
}

// readBody reads the request body once, at most maxBody bytes, parses what
// needs asks for, and puts the bytes back so the next handler reads them
// unchanged. A failure is the answer to give the sender.
func readBody(r *http.Request, needs int, maxBody int64) (*body, *failure) {
	if r.ContentLength > maxBody {
		return nil, tooLarge(maxBody)
	}
	var raw []byte
	if r.Body != nil && r.Body != http.NoBody {
		var err error
		raw, err = io.ReadAll(io.LimitReader(r.Body, maxBody+1))
		if err != nil {
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				return nil, tooLarge(mbe.Limit)
			}
			return nil, &failure{status: http.StatusBadRequest, reason: fmt.Sprintf("reading request body: %v", err)}
		}
		if int64(len(raw)) > maxBody {
			return nil, tooLarge(maxBody)
		}
		r.Body = replayBody{Reader: bytes.NewReader(raw), Closer: r.Body}
	}

	b := &body{}
	if needs&needJSON != 0 {
		v, err := parseJSON(raw)
		if err != nil {
			return nil, &failure{status: http.StatusBadRequest, reason: "request body is not valid JSON: " + err.Error()}
		}
		b.json = v
	}
	if needs&needForm != 0 {
		f, err := url.ParseQuery(string(raw))
		if err != nil {
			return nil, &failure{status: http.StatusBadRequest, reason: "request body is not a valid form: " + err.Error()}
		}
		b.form = f
	}
	return b, nil
}

// replayBody serves the bytes already read and closes the original body.
type replayBody struct {
	io.Reader
	io.Closer
}

func tooLarge(limit int64) *failure {
	return &failure{status: http.StatusRequestEntityTooLarge, reason: fmt.Sprintf("request body is larger than max_body (%d bytes)", limit)}
}

// parseJSON decodes exactly one JSON value, keeping numbers as sent. It
// refuses bodies on whose values two readers could disagree: bytes that
// are not UTF-8 (RFC 8259 §8.1; decoding would turn distinct ones into the
// same U+FFFD) and an object that names a member twice (parsers differ on
// which one counts, so a sender could be counted under one recipient and
// delivered to another).
func parseJSON(raw []byte) (any, error) {
	if !utf8.Valid(raw) {
		return nil, errors.New("not UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, errors.New("empty body")
		}
		return nil, err
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errors.New("data after the JSON value")
	}
	if name, ok := repeatedName(raw); ok {
		return nil, fmt.Errorf("an object names %q twice", name)
	}
	return v, nil
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
	for i := 0; i < len(raw); i++ {
		switch raw[i] {
		case '{':
			stack = append(stack, level{object: true})
			wantName = true
		case '[':
			stack = append(stack, level{})
		case '}', ']':
			stack = stack[:len(stack)-1]
		case ',':
			wantName = stack[len(stack)-1].object
		case '"':
			j, escaped := i+1, false
			for raw[j] != '"' {
				if raw[j] == '\\' {
					escaped = true
					j++
				}
				j++
			}
			if wantName {
				wantName = false
				name := raw[i+1 : j]
				if escaped {
					var s string
					_ = json.Unmarshal(raw[i:j+1], &s) // valid: Decode read it
					name = []byte(s)
				}
				if !stack[len(stack)-1].names.add(name) {
					return string(name), true
				}
			}
			i = j
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

// lookupJSON follows a dotted path (object keys and array indices) and
// renders the value found: a string as its text, a number exactly as sent,
// true/false, and an object or array as compact JSON. null and a path that
// leads nowhere are not found.
func lookupJSON(v any, path string) (any, bool) {
	if path == "" {
		return nil, false
	}
	for seg := range strings.SplitSeq(path, ".") {
		switch x := v.(type) {
		case map[string]any:
			next, ok := x[seg]
			if !ok {
				return nil, false
			}
			v = next
		case []any:
			i, err := strconv.Atoi(seg)
			if err != nil || i < 0 || i >= len(x) {
				return nil, false
			}
			v = x[i]
		default:
			return nil, false
		}
	}
	switch x := v.(type) {
	case nil:
		return nil, false
	case string:
		return x, true
	case json.Number:
		return x.String(), true
	case bool:
		return strconv.FormatBool(x), true
	}
	out, err := json.Marshal(v)
	if err != nil {
		return nil, false
	}
	return string(out), true
}
