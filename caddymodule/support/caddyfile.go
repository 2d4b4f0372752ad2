package support

import (
	"encoding/json"
	"net/http"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// The directive frequency_cap_console is registered and ordered in
// caddyfile.go, next to frequency_cap, which it must precede.

func init() {
	httpcaddyfile.RegisterDirective("frequency_cap_console", parseConsoleCaddyfile)
}

// parseConsoleCaddyfile makes the console's route, as a handler directive
// would; mounted on a path prefix (/support/*), it adds a route that
// redirects the prefix without its slash (/support) to it, which the
// matcher would otherwise pass on to whatever comes next (an upstream).
func parseConsoleCaddyfile(h httpcaddyfile.Helper) ([]httpcaddyfile.ConfigValue, error) {
	if !h.Next() {
		return nil, h.ArgErr()
	}
	matcherSet, err := h.ExtractMatcherSet()
	if err != nil {
		return nil, err
	}
	if exact := exactPath(matcherSet); exact != "" {
		return nil, h.Errf("frequency_cap_console %s: the console serves its page there and its API under %s/api/, which an exact path does not match (the page's requests would go on to the next handler, an upstream); write %s/*", exact, exact, exact)
	}
	c := new(Console)
	if err := c.UnmarshalCaddyfile(h.Dispenser); err != nil {
		return nil, err
	}
	routes := h.NewRoute(matcherSet, c)
	if mount, ok := mountOf(matcherSet); ok {
		redirect := &caddyhttp.StaticResponse{
			StatusCode: caddyhttp.WeakString(strconv.Itoa(http.StatusPermanentRedirect)),
			Headers:    http.Header{"Location": []string{mount + "/"}},
		}
		raw, err := json.Marshal(caddyhttp.MatchPath{mount})
		if err != nil {
			return nil, err
		}
		routes = append(routes, h.NewRoute(caddy.ModuleMap{"path": raw}, redirect)...)
	}
	return routes, nil
}

// exactPath is the first path of a matcher set's path matcher that has no
// wildcard: it matches the page alone, not the console's API beneath it.
func exactPath(set caddy.ModuleMap) string {
	var paths []string
	if raw, ok := set["path"]; !ok || json.Unmarshal(raw, &paths) != nil {
		return ""
	}
	for _, p := range paths {
		if !strings.Contains(p, "*") {
			return strings.TrimSuffix(p, "/")
		}
	}
	return ""
}

// mountOf is the prefix of a matcher set that is one path prefix and
// nothing else: /support of path /support/*.
func mountOf(set caddy.ModuleMap) (string, bool) {
	raw, ok := set["path"]
	if !ok || len(set) != 1 {
		return "", false
	}
	var paths []string
	if err := json.Unmarshal(raw, &paths); err != nil || len(paths) != 1 {
		return "", false
	}
	mount, ok := strings.CutSuffix(paths[0], "/*")
	if !ok || mount == "" || strings.ContainsAny(mount, "*{") {
		return "", false
	}
	return mount, true
}

// UnmarshalCaddyfile implements caddyfile.Unmarshaler. Syntax:
//
//	frequency_cap_console [<matcher>] [{
//	    cap_sets    <name>...
//	    read_only
//	    user_header <field>
//	    public
//	}]
//
// Each subdirective may appear once. Mount it on a path prefix behind
// authentication (without it, the console answers 403), for example:
//
//	basic_auth /support/* {
//	    alice <bcrypt hash from caddy hash-password>
//	}
//	frequency_cap_console /support/*
func (c *Console) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if seen[sub] {
			return d.Errf("%s already specified", sub)
		}
		seen[sub] = true
		switch sub {
		case "cap_sets":
			c.CapSets = d.RemainingArgs()
			if len(c.CapSets) == 0 {
				return d.ArgErr()
			}
			for _, name := range c.CapSets {
				if !limiter.ValidDimensionName(name) {
					return d.Errf("cap_sets: invalid name %q (a letter or '_', then letters, digits, '_', '.', '-'; at most 64 bytes)", name)
				}
			}
		case "read_only":
			c.ReadOnly = true
			if d.NextArg() {
				return d.ArgErr()
			}
		case "public":
			c.Public = true
			if d.NextArg() {
				return d.ArgErr()
			}
		case "user_header":
			if !d.AllArgs(&c.UserHeader) {
				return d.ArgErr()
			}
		default:
			return d.Errf("unrecognized subdirective %q", sub)
		}
	}
	return nil
}
