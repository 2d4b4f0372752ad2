package caddymodule

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/freqcap/caddy-freqcap/internal/jsonbatch"
)

// An expression's mistakes that would make every request look alike are
// config errors, found at caddy adapt: a placeholder left open reads as
// text (every device "{json.message.token"), a constant dimension gives
// every recipient one shared count, and a dimension no rule counts by
// caps nothing. Each error says what to write instead.

// globalDimension is the dimension a counting rule without `by` counts
// by: one count over every send of the cap set ("at most 10,000 pushes
// a minute in all"). Its value is the constant globalValue; users cannot
// declare it.
const (
	globalDimension = "_every_send"
	globalValue     = "all"
)

// checkBraces checks that every `{` of expr is closed by a `}` before
// the next `{`, that no `}` comes without its `{`, and that no
// placeholder is empty. A brace escaped with a backslash is text, as
// Caddy's replacer reads it.
func checkBraces(expr string) error {
	open := -1
	for i := 0; i < len(expr); i++ {
		switch expr[i] {
		case '\\':
			i++ // the next byte is text
		case '{':
			if open >= 0 {
				return fmt.Errorf("%q opens a placeholder at %q before closing the one at %q; write %s}", expr, expr[i:], expr[open:i], strings.TrimSpace(expr[open:i]))
			}
			open = i
		case '}':
			if open < 0 {
				return fmt.Errorf("%q closes a placeholder it never opened (the \"}\" at %q); write {<name>} whole, or \\} for a brace as text", expr, expr[i:])
			}
			if i == open+1 {
				return fmt.Errorf("%q has an empty placeholder {}", expr)
			}
			open = -1
		}
	}
	if open >= 0 {
		return fmt.Errorf("%q does not close its placeholder %q; write %s}", expr, expr[open:], expr[open:])
	}
	return checkBodyPaths(expr)
}

// bodyPlaceholders are the module's placeholders that read a field of
// the body: each needs a path (a form field's name) after its dot.
var bodyPlaceholders = []string{"json", "form", jsonbatch.FCMTopics.Name, jsonbatch.FCMTopic.Name, jsonbatch.EmailAddress.Name, jsonbatch.DeviceToken.Name}

// checkBodyPaths refuses a body placeholder without a path, or whose
// path does not parse ({json}, {json.}, {json..to}, {json.to.}), and a
// request placeholder Caddy does not provide ({http.request.heder.X}): it
// would find nothing in any request, so under on_missing skip its rules
// would cap nothing, and under reject every request would be a 400.
func checkBodyPaths(expr string) error {
	for rest := expr; ; {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			return nil
		}
		if i > 0 && rest[i-1] == '\\' {
			rest = rest[i+1:]
			continue
		}
		end := strings.IndexByte(rest[i:], '}')
		if end < 0 {
			return nil // checkBraces reports it
		}
		name := rest[i+1 : i+end]
		rest = rest[i+end:]
		name, lowered := cutLower(name)
		if err := checkShorthand(expr, name, lowered); err != nil {
			return err
		}
		if lowered {
			if err := checkLowered(expr, name); err != nil {
				return err
			}
		}
		if strings.HasPrefix(name, "http.request.") && !caddyKnows(name) {
			return fmt.Errorf("%q: {%s} is no placeholder Caddy provides, so it would read as empty in every request; "+
				"check its spelling ({http.request.header.<field>}, {http.request.uri.query.<name>}, {http.request.uri.path.<n>})", expr, name)
		}
		for _, kind := range bodyPlaceholders {
			path, dotted := strings.CutPrefix(name, kind+".")
			switch {
			case name == kind:
				return fmt.Errorf("%q: {%s} names no field; write {%s.<path>}", expr, name, kind)
			case !dotted:
				continue
			case kind == "form":
				if path == "" {
					return fmt.Errorf("%q: {%s} names no field; write {form.<field>}", expr, name)
				}
			default:
				if _, err := jsonbatch.ParsePath(path); err != nil {
					return fmt.Errorf("%q: %v", expr, err)
				}
			}
		}
	}
}

// constantPrefixes are the placeholders whose value is the same for
// every request: the environment, the host, the process, and the time
// coarser than everNew's ({time.now.year}: one count a year).
var constantPrefixes = []string{"env.", "$", "system.", "caddy.", "file.", "time."}

// everNew are the placeholders new at every request (the time to the
// second or finer, the request's id and how long it has taken): a
// dimension that reads one is a count of its own for every send, so its
// rules would cap nothing.
var everNew = []string{"time.now", "time.now.unix", "time.now.unix_ms", "time.now.http", "time.now.common_log", "http.request.uuid", "http.request.duration", "http.request.duration_ms"}

// innerNames returns the names of expr's placeholders, a {lower.…}
// one's as the name inside it (it is new, or constant, as that is).
func innerNames(expr string) []string {
	var names []string
	for rest := expr; ; {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			return names
		}
		if i > 0 && rest[i-1] == '\\' {
			rest = rest[i+1:]
			continue
		}
		end := strings.IndexByte(rest[i:], '}')
		if end < 0 {
			return names
		}
		name, _ := cutLower(rest[i+1 : i+end])
		names = append(names, name)
		rest = rest[i+end:]
	}
}

// readsRequest reports whether expr reads anything of a request: a
// placeholder other than the constant ones. (A placeholder of Caddy's
// map or vars directives reads the request through them, whatever its
// name.)
func readsRequest(expr string) bool {
	for _, name := range innerNames(expr) {
		constant := false
		for _, p := range constantPrefixes {
			constant = constant || strings.HasPrefix(name, p)
		}
		if !constant {
			return true
		}
	}
	return false
}

// checkDimension checks one expression of a dimension (a whole one, or
// one of its alternatives).
func checkDimension(name, expr string) error {
	if name == globalDimension {
		return fmt.Errorf("dimension %s: the name is reserved for rules without by", name)
	}
	if err := checkBraces(expr); err != nil {
		return fmt.Errorf("dimension %s: %w", name, err)
	}
	for _, p := range innerNames(expr) {
		if slices.Contains(everNew, p) {
			return fmt.Errorf("dimension %s: %q reads {%s}, new at every request, so no two sends would share a count and its rules would cap nothing", name, expr, p)
		}
	}
	if !readsRequest(expr) {
		return fmt.Errorf("dimension %s: %q reads nothing of the request, so every send would share one count; "+
			"name a request placeholder such as {json.to} or {http.request.header.X-User}, "+
			"or, for one count over every send, write a rule without by", name, expr)
	}
	return nil
}

// unusedDimension is the error for a declared dimension no rule counts
// by.
func unusedDimension(name string) error {
	return fmt.Errorf("dimension %s is declared but no rule counts by it, so it caps nothing; add it to a rule's by, or remove it", name)
}

// checkPlaceholder checks the braces of a rule's or exempt's placeholder
// (what names it, say "rule r: cost").
func checkPlaceholder(what, expr string) error {
	if !isPlaceholder(expr) {
		return nil
	}
	if err := checkBraces(expr); err != nil {
		return fmt.Errorf("%s: %w", what, err)
	}
	return nil
}

// zeroCost refuses a constant cost of 0: every send would count nothing,
// so the rule would never refuse one. (A placeholder cost may be 0 for
// some requests: those are the sends that cost nothing.)
const zeroCost = "cost 0 counts no send, so the rule caps nothing; remove the rule, or watch it with dry_run"

// checkMatchValues refuses an empty value of exempt or skip (what): a
// request without the placeholder reads as empty, so every such request
// would pass every rule.
func checkMatchValues(what string, values []string) error {
	for _, v := range values {
		if strings.TrimSpace(v) == "" {
			return fmt.Errorf("%s: the value %q matches every request that lacks the placeholder, so nothing would be capped for them; name the values that %s, such as %s", what, v, what, map[string]string{"exempt": "otp", "skip": "true"}[what])
		}
	}
	return nil
}

// caddyKnows reports whether Caddy's HTTP replacer provides the
// {http.request.*} placeholder name, asked of a request made up for it.
// Those it provides only for some requests (tls.*, the local address)
// count as provided: a name whose lookup panics on the made-up request is
// one Caddy knows.
func caddyKnows(name string) (known bool) {
	defer func() {
		if recover() != nil {
			known = true
		}
	}()
	ctx := context.WithValue(context.Background(), caddyhttp.VarsCtxKey, map[string]any{})
	ctx = context.WithValue(ctx, caddyhttp.ExtraLogFieldsCtxKey, new(caddyhttp.ExtraLogFields))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://localhost/", nil)
	if err != nil {
		return true
	}
	req.RemoteAddr = "127.0.0.1:1"
	_, known = caddyhttp.NewTestReplacer(req).Get(name)
	return known
}
