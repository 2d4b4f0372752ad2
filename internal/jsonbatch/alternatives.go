package jsonbatch

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Alternatives returns a path whose entries are those of every one of
// paths: the fields through which an API takes one kind of address, such
// as gorush's "notifications.*.tokens.*" and "notifications.*.to". Its
// entries are in body order, each with the alternative that named it
// (Entry.Alt) and a path in it.
//
// The alternatives share their leading segments up to some wildcard (the
// message level, none for fields of one message): a message is missing
// the dimension only when no alternative names anything in it, so a
// missing or null alternative where another one names an entry is no
// Miss. A value that is the empty string counts as missing (Go's zero
// value: gorush reads "to": "" as no "to"). What an alternative finds
// below the message level, and a wildcard that meets something other
// than an array, are Misses as for one path.
//
// A path may be given once, and has no alternatives of its own.
func Alternatives(paths ...*Path) (*Path, error) {
	switch len(paths) {
	case 0:
		return nil, errors.New("no alternatives")
	case 1:
		return paths[0], nil
	}
	first := paths[0]
	group := len(first.wild)
	texts := make([]string, len(paths))
	for i, a := range paths {
		if len(a.alts) > 0 {
			return nil, fmt.Errorf("%q has alternatives of its own", a.text)
		}
		if slices.Contains(texts[:i], a.text) {
			return nil, fmt.Errorf("%q is given twice", a.text)
		}
		texts[i] = a.text
		// The wildcards of first that lie in the prefix a shares with it.
		n := 0
		for n < len(a.segs) && n < len(first.segs) && sameSeg(a.segs[n], first.segs[n]) {
			n++
		}
		g := 0
		for g < len(first.wild) && first.wild[g] < n {
			g++
		}
		group = min(group, g)
	}
	return &Path{text: strings.Join(texts, " "), alts: slices.Clone(paths), group: group}, nil
}

// Alternatives returns the paths p reads: its alternatives, or p alone.
func (p *Path) Alternatives() []*Path { return slices.Clone(p.each()) }

// StartsWild reports whether every path p reads starts with a wildcard:
// p reads the body as an array of messages (an object as one, see
// EnumerateMessages).
func (p *Path) StartsWild() bool {
	for _, a := range p.each() {
		if len(a.wild) == 0 || a.wild[0] != 0 {
			return false
		}
	}
	return true
}

// enumerateEach is Enumerate for a path with alternatives or a reader:
// each alternative walked, its values read, and the results merged in
// body order.
func (p *Path) enumerateEach(doc []byte, max int) (*Batch, error) {
	out := &Batch{Doc: doc, Path: p}
	group := len(p.wild)
	if len(p.alts) > 0 {
		group = p.group
	}
	var misses []Miss
	for ai, a := range p.each() {
		b, err := a.enumerate(doc, max)
		if err != nil {
			return nil, err
		}
		off := len(out.elems)
		out.elems = append(out.elems, b.elems...)
		for _, e := range b.Entries {
			e.tuple += off
			e.Alt = ai
			switch {
			case e.Kind == String && e.Text == "":
				misses = append(misses, Miss{Path: a.concrete(e.Indices), Indices: e.Indices, alt: ai})
				continue
			case p.reader == nil && a.reader == nil:
				out.Entries = append(out.Entries, e)
				continue
			}
			r := cmp.Or(a.reader, p.reader)
			if e.Kind != String {
				return nil, fmt.Errorf("%s is %s %s where %s reads a string", a.concrete(e.Indices), article(e.Kind), e.Kind, r.Name)
			}
			names, err := r.Read(e.Text)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", a.concrete(e.Indices), err)
			}
			for _, name := range names {
				e.Text = name
				out.Entries = append(out.Entries, e)
			}
		}
		for _, m := range b.Missing {
			m.alt = ai
			misses = append(misses, m)
		}
		// The misses of the alternatives a message leaves out are no
		// entries (keptMisses drops them): only entries count here, and
		// the misses kept below. Each alternative's walk is bounded by
		// max on its own, so what is held stays bounded.
		if len(out.Entries) > max {
			return nil, fmt.Errorf("%w: more than %d", ErrTooMany, max)
		}
	}
	slices.SortStableFunc(out.Entries, func(x, y Entry) int { return cmp.Compare(x.Start, y.Start) })
	out.Missing = keptMisses(out.Entries, misses, group)
	if len(out.Entries)+len(out.Missing) > max {
		return nil, fmt.Errorf("%w: more than %d", ErrTooMany, max)
	}
	if len(out.Entries) == 0 {
		out.elems = nil
	}
	return out, nil
}

// keptMisses returns the misses that leave a message without the
// dimension, in body order: a miss below the message level (group
// wildcards deep) or of a wildcard that met no array, and, for a message
// no alternative names an entry in, its first alternative's miss.
func keptMisses(ents []Entry, misses []Miss, group int) []Miss {
	key := func(idx []int) string {
		var b strings.Builder
		for _, i := range idx[:min(group, len(idx))] {
			b.WriteString(strconv.Itoa(i))
			b.WriteByte('.')
		}
		return b.String()
	}
	named := map[string]bool{}
	for _, e := range ents {
		named[key(e.Indices)] = true
	}
	// A message with a miss inside one of its alternatives ({"tokens":
	// [null]}) is told by that miss, not by the alternatives it leaves
	// out: the sender wrote tokens, and a 400 naming "to" misleads.
	deep := map[string]bool{}
	for _, m := range misses {
		if m.NotArray != Missing || len(m.Indices) > group {
			deep[key(m.Indices)] = true
		}
	}
	var out []Miss
	seen := map[string]bool{}
	for _, m := range misses {
		switch {
		case m.NotArray != Missing || len(m.Indices) > group:
			out = append(out, m)
		case len(m.Indices) == group && deep[key(m.Indices)]:
		default: // the message, or the document above it, names none here
			k := strconv.Itoa(len(m.Indices)) + ":" + key(m.Indices)
			if !named[key(m.Indices)] || len(m.Indices) < group {
				if !seen[k] {
					seen[k] = true
					out = append(out, m)
				}
			}
		}
	}
	slices.SortStableFunc(out, func(x, y Miss) int { return slices.Compare(x.Indices, y.Indices) })
	return out
}

// article is "a" or "an" before a kind's name.
func article(k Kind) string {
	if k == Object || k == Array {
		return "an"
	}
	return "a"
}
