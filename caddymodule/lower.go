package caddymodule

import (
	"fmt"
	"strings"

	"github.com/caddyserver/caddy/v2"
)

// {lower.<placeholder>} is another placeholder's value in lower case, for
// identifiers that their service reads case-blind but senders spell
// either way: an APNs device token is hex, and APNs delivers
// /3/device/ABCDEF0A1 to the device of abcdef0a1, so a cap counting the
// path as written could be passed by upper-casing it. It reads what the
// request carries outside its body (a header, a query parameter, a path
// segment, a map's output); a body field is read by a body placeholder,
// whose readers ({email.*}) already count a respelling as one.

const lowerPrefix = "lower."

// cutLower returns name without its {lower.…} wrappings, and whether it
// had any.
func cutLower(name string) (string, bool) {
	lowered := false
	for strings.HasPrefix(name, lowerPrefix) {
		name, lowered = name[len(lowerPrefix):], true
	}
	return name, lowered
}

// checkLowered refuses {lower.} of nothing, and of a body placeholder: a
// body field's values go through the body's readers (batch paths among
// them), which the replacer does not see.
func checkLowered(expr, inner string) error {
	if inner == "" {
		return fmt.Errorf("%q: {lower.} names no placeholder; write {lower.<placeholder>}, e.g. {lower.http.request.uri.path.2}", expr)
	}
	for _, kind := range bodyPlaceholders {
		if inner == kind || strings.HasPrefix(inner, kind+".") {
			return fmt.Errorf("%q: {lower.%s} reads a body field, which {lower.*} cannot; it lower-cases what the request carries outside its body (a header, a query parameter, a path segment)", expr, inner)
		}
	}
	return nil
}

// unlowered is expr with each {lower.<placeholder>} read as its
// placeholder: what the request reads.
func unlowered(expr string) string {
	for strings.Contains(expr, "{"+lowerPrefix) {
		expr = strings.ReplaceAll(expr, "{"+lowerPrefix, "{")
	}
	return expr
}

// lowerProvider answers {lower.<placeholder>} from repl; it is a
// caddy.ReplacerFunc.
func lowerProvider(repl *caddy.Replacer) caddy.ReplacerFunc {
	return func(key string) (any, bool) {
		inner, ok := strings.CutPrefix(key, lowerPrefix)
		if !ok {
			return nil, false
		}
		v, ok := repl.GetString(inner)
		if !ok {
			return nil, false
		}
		return strings.ToLower(v), true
	}
}

// wholeLower reports whether expr is one {lower.…} placeholder and
// nothing else, so that a value looked up by the admin API or the console
// is counted under its lower case.
func wholeLower(expr string) bool {
	inner, ok := strings.CutPrefix(expr, "{"+lowerPrefix)
	return ok && strings.HasSuffix(inner, "}") && !strings.ContainsAny(inner[:len(inner)-1], "{}")
}
