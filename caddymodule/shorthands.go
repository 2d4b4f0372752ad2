package caddymodule

import (
	"fmt"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
)

// The Caddyfile's placeholder shorthands ({header.X}, {query.to},
// {path.2}, ...) are the Caddyfile adapter's: it rewrites them to
// Caddy's names ({http.request.header.X}) before a directive reads them.
// A config written in JSON (caddy run --config x.json, POST /load) gets
// them as written, and Caddy's replacer knows none of them, so each
// would read as empty in every request: under on_missing skip its rules
// would cap nothing. So are the shorthands inside {lower.…}, which the
// adapter leaves alone in either form. Both are config errors naming
// the name to write.

var shorthands = httpcaddyfile.NewShorthandReplacer()

// shorthandFor returns the placeholder Caddy knows for the Caddyfile
// shorthand {name}, and false when name is none.
func shorthandFor(name string) (string, bool) {
	seg := caddyfile.Segment{{Text: "{" + name + "}"}}
	shorthands.ApplyToSegment(&seg)
	full := seg[0].Text
	return full, full != "{"+name+"}"
}

// checkShorthand refuses a Caddyfile shorthand where only Caddy's own
// name is read: in a JSON config, or inside {lower.…} (lowered).
func checkShorthand(expr, name string, lowered bool) error {
	full, ok := shorthandFor(name)
	if !ok {
		return nil
	}
	if lowered {
		return fmt.Errorf("%q: {lower.%s} reads nothing: the Caddyfile's shorthand {%s} is not rewritten inside {lower.…}; write {lower.%s}", expr, name, name, full[1:len(full)-1])
	}
	return fmt.Errorf("%q: {%s} is the Caddyfile's shorthand, which only the Caddyfile adapter rewrites, so in a JSON config it reads as empty in every request; write %s", expr, name, full)
}
