package caddymodule

import (
	"fmt"
	"strings"

	"github.com/caddyserver/caddy/v2"

	"github.com/freqcap/caddy-freqcap/caddymodule/internal/reply"
	"github.com/freqcap/caddy-freqcap/internal/jsonbatch"
)

// A dimension other than the batch dimension may run several fields of
// each entry together, with text between them:
// {json.notifications.*.title}{json.notifications.*.message} is the text a
// device shows of each notification, so the same text moved from one
// field to the other is the same content. Each wildcard path is read per
// entry, as a dimension of one path is; the text between them, with any
// other placeholder, once per request.

// templatePart is a piece of an entry template: text (resolved by the
// replacer) or a wildcard path (read per entry).
type templatePart struct {
	text string
	path *jsonbatch.Path
}

// entryTemplate parses expr as a template with wildcard paths. It returns
// nil when expr has no wildcard path or is exactly one placeholder (a
// plain per-entry dimension, or one resolved once).
func entryTemplate(expr string) ([]templatePart, error) {
	if p, _, _ := fieldPath(expr); p != nil {
		return nil, nil
	}
	var parts []templatePart
	wild := false
	for rest := expr; rest != ""; {
		i := strings.Index(rest, "{json.")
		if i < 0 {
			parts = append(parts, templatePart{text: rest})
			break
		}
		end := strings.IndexByte(rest[i:], '}')
		if end < 0 {
			return nil, nil // checkBraces reports it
		}
		path := rest[i+len("{json.") : i+end]
		if !hasWildcard(path) {
			parts = append(parts, templatePart{text: rest[:i+end+1]})
			rest = rest[i+end+1:]
			continue
		}
		p, err := jsonbatch.ParsePath(path)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", expr, err)
		}
		if i > 0 {
			parts = append(parts, templatePart{text: rest[:i]})
		}
		parts = append(parts, templatePart{path: p})
		wild = true
		rest = rest[i+end+1:]
	}
	if !wild {
		return nil, nil
	}
	if hasReader(expr) {
		// A reader's placeholder in a text part would go to the
		// replacer, which knows nothing of it, and read nothing.
		return nil, fmt.Errorf("%q: a %s placeholder must be the whole expression", expr, readerNames)
	}
	return parts, nil
}

// keyTemplateParts holds each field a keying dimension's template reads
// per entry to keyKind, as a dimension of one path is held.
func keyTemplateParts(b *jsonbatch.Batch, name string, parts []templatePart) *reply.Failure {
	for _, part := range parts {
		if part.path == nil {
			continue
		}
		vs, _ := b.Resolve(part.path)
		for i := range vs {
			if f := keyKind(name, b.EntryPath(i), vs[i]); f != nil {
				return f
			}
		}
	}
	return nil
}

// templateText resolves a template for every entry of b: each entry's
// fields run together with the text between them.
func templateText(repl *caddy.Replacer, b *jsonbatch.Batch, parts []templatePart) entryText {
	n := len(b.Entries)
	if n == 0 {
		return entryText{each: []jsonbatch.Value{}, perEntry: true}
	}
	var sb []strings.Builder = make([]strings.Builder, n)
	for _, part := range parts {
		if part.path == nil {
			text := repl.ReplaceAll(part.text, "")
			for i := range sb {
				sb[i].WriteString(text)
			}
			continue
		}
		vs, _ := b.Resolve(part.path) // compileBatch checked the path
		for i := range vs {
			sb[i].WriteString(vs[i].Text)
		}
	}
	each := make([]jsonbatch.Value, n)
	for i := range each {
		each[i] = jsonbatch.Value{Text: sb[i].String(), Kind: jsonbatch.String}
		if each[i].Text == "" {
			each[i].Kind = jsonbatch.Missing
		}
	}
	return entryText{each: each, perEntry: true}
}
