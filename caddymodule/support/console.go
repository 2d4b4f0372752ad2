package support

import (
	"crypto/sha256"
	_ "embed"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"golang.org/x/net/http/httpguts"

	"github.com/freqcap/caddy-freqcap/caddymodule/internal/capset"
	"github.com/freqcap/caddy-freqcap/caddymodule/internal/reply"
	"github.com/freqcap/caddy-freqcap/limiter"
)

func init() {
	caddy.RegisterModule(new(Console))
}

// Console serves the support console: one self-contained HTML page (no
// external assets) on which support staff look up the usage of a
// recipient in every cap set, see each rule as a bar (used of limit) with
// the time until it frees up, and reset it. It is a terminal handler; the
// user mounts it on a path prefix of their choice, behind their own
// authentication. It shows who was messaged how often (personal data)
// and lifts caps, so it serves only requests that carry an authenticated
// user: {http.auth.user.id}, which basic_auth sets, or the UserHeader
// that forward_auth's copy_headers sets. Any other request gets 403 with
// a page (or, under api/, a JSON reason) saying how to put authentication
// in front, unless Public opts out.
//
// Under its mount, the last segments of the path choose what it serves,
// so it works with and without handle_path's prefix stripping:
//
//	GET    .../api/capsets                          the cap sets (below)
//	GET    .../api/capsets/<name>/usage?<dim>=<v>   as the admin API's GET
//	DELETE .../api/capsets/<name>/usage?<dim>=<v>   as the admin API's DELETE
//	GET    .../api/capsets/<name>/records?<dim>=<v> everything held under one value
//	DELETE .../api/capsets/<name>/records?<dim>=<v> forget all of it
//	GET    anything else                            the page
//
// The usage endpoints answer exactly as AdminAPI does (same bodies, same
// errors). The cap set list is {"read_only": bool, "capsets": [{"name",
// "store" ("memory" or "redis"), "dry_run", "dimensions" (those its rules
// use, in the order they first appear), "zoned" (whether the zone
// parameter applies), "inputs" (the values beyond the dimensions its
// answers depend on, each a parameter: see AdminAPI), "rules": [{"rule",
// "by", "limit", "window", and "limit_from", "zone_from", "cost_from" in
// words when a placeholder gives them}]}]}. The page's Reset, from any
// view, deletes the records of her dimension's value, never a log kept
// under another value.
//
// A DELETE from another origin is refused (403), so that a page elsewhere
// cannot make a signed-in browser reset a recipient. Resets are logged at
// info with the handler, the rules and, when authentication set one, the
// user ({http.auth.user.id}).
type Console struct {
	// CapSets names the cap sets (frequency_cap handlers, by name) that
	// the console shows and resets; any other answers 404 as if it did
	// not exist. By default the console shows every cap set of the running
	// config.
	CapSets []string `json:"cap_sets,omitempty"`

	// ReadOnly hides the reset button and refuses resets (403), for
	// staff who may look but not change. Default false: resets are
	// allowed.
	ReadOnly bool `json:"read_only,omitempty"`

	// UserHeader names a request header that carries the authenticated
	// user, for forward_auth with "copy_headers <field>" in front (Caddy
	// replaces whatever the client sent in that field with the auth
	// service's answer, or removes it). Set it only behind forward_auth:
	// without it, any client could name itself. Default: none, only
	// {http.auth.user.id} (basic_auth) counts.
	UserHeader string `json:"user_header,omitempty"`

	// Public serves the console to every request, authenticated or not,
	// for a console on a private network; a warning is logged at start.
	// Default false: a request without an authenticated user gets 403.
	Public bool `json:"public,omitempty"`

	shown  map[string]bool
	logger *zap.Logger
	// warnedUnknown: a cap_sets name no cap set has was logged
	// (console_capsets.go); made with shown.
	warnedUnknown *atomic.Bool
}

// CaddyModule returns the Caddy module information.
func (*Console) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.frequency_cap_console",
		New: func() caddy.Module { return new(Console) },
	}
}

// Provision indexes CapSets and warns of a public console. The cap sets
// themselves are looked up on every request: they may be provisioned
// after the console, or in another server, and a config reload replaces
// them.
func (c *Console) Provision(ctx caddy.Context) error {
	c.logger = ctx.Logger()
	if c.Public {
		c.logger.Warn("frequency_cap_console is public: it shows every recipient's usage and lets anyone who reaches it reset caps; put basic_auth or forward_auth in front and remove public unless this network is private")
	}
	if len(c.CapSets) > 0 {
		c.shown, c.warnedUnknown = make(map[string]bool, len(c.CapSets)), new(atomic.Bool)
		for _, name := range c.CapSets {
			c.shown[name] = true
		}
	}
	return nil
}

// Validate checks the names in CapSets, and UserHeader: a field name no
// request can carry would answer every request 403, and beside Public it
// would never be read.
func (c *Console) Validate() error {
	for _, name := range c.CapSets {
		if !limiter.ValidDimensionName(name) {
			return fmt.Errorf("frequency_cap_console: cap_sets: invalid name %q (a letter or '_', then letters, digits, '_', '.', '-'; at most 64 bytes)", name)
		}
	}
	if c.UserHeader != "" && !httpguts.ValidHeaderFieldName(c.UserHeader) {
		return fmt.Errorf("frequency_cap_console: user_header %q is no header field name (letters, digits and !#$%%&'*+-.^_`|~), so no request would carry it", c.UserHeader)
	}
	if c.UserHeader != "" && c.Public {
		return errors.New("frequency_cap_console: public serves every request, so user_header would never be read; remove one of them")
	}
	return nil
}

// consoleCrossOrigin refuses state-changing requests that a browser marks
// as coming from another origin (Sec-Fetch-Site, or Origin against Host).
var consoleCrossOrigin = http.NewCrossOriginProtection()

// ServeHTTP implements caddyhttp.MiddlewareHandler; it never calls next.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request, _ caddyhttp.Handler) error {
	harden(w.Header())
	endpoint, name := consoleRoute(r.URL.Path)
	user := c.user(r)
	if user == "" && !c.Public {
		return unauthenticated(w, endpoint)
	}
	switch endpoint {
	case endpointCapSets:
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			return (&reply.Failure{Status: http.StatusMethodNotAllowed, Reason: "method " + r.Method + " not allowed: use GET"}).Write(w)
		}
		return reply.JSON(w, http.StatusOK, "application/json", c.list())
	case endpointUsage, endpointRecords:
		if !c.shows(name) {
			return c.notShown(w, name)
		}
		if r.Method == http.MethodDelete {
			if c.ReadOnly {
				return (&reply.Failure{Status: http.StatusForbidden, Reason: "this console is read-only: resets are not allowed"}).Write(w)
			}
			if err := consoleCrossOrigin.Check(r); err != nil {
				return (&reply.Failure{Status: http.StatusForbidden, Reason: "reset refused: " + err.Error()}).Write(w)
			}
		}
		var who []zap.Field
		if user != "" {
			who = []zap.Field{zap.String("user", user)}
		}
		if endpoint == endpointRecords {
			return serveRecords(w, r, name, "console", c.shown != nil, who...)
		}
		return serveUsage(w, r, name, "console", who...)
	case endpointUnknown:
		return (&reply.Failure{Status: http.StatusNotFound, Reason: "not found: use api/capsets, api/capsets/<name>/usage?<dimension>=<value> or api/capsets/<name>/records?<dimension>=<value>"}).Write(w)
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		return (&reply.Failure{Status: http.StatusMethodNotAllowed, Reason: "method " + r.Method + " not allowed: use GET"}).Write(w)
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(consolePage)))
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", consoleCSP) // over harden's
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return nil
	}
	_, err := w.Write(consolePage)
	return err
}

// harden sets the headers of every console and admin API answer: JSON
// with personal data (recipients, their records) is not to be sniffed as
// anything else, framed, or sent on as a referrer. The page sets its own
// policy over this one.
func harden(h http.Header) {
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
	h.Set("Referrer-Policy", "no-referrer")
}

// consoleEndpoint is what a console request asks for.
type consoleEndpoint int

const (
	endpointPage consoleEndpoint = iota
	endpointCapSets
	endpointUsage
	endpointRecords
	endpointUnknown // under api/, but nothing there
)

// consoleRoute reads the endpoint from the end of the path, so that the
// console needs to know neither its mount point nor whether handle_path
// stripped it: .../api/capsets, .../api/capsets/<name>/usage, another
// path with an api segment, or the page. A cap set name has no '/', so
// this is unambiguous.
func consoleRoute(path string) (consoleEndpoint, string) {
	segs := strings.Split(strings.TrimSuffix(path, "/"), "/")
	n := len(segs)
	switch {
	case n >= 2 && segs[n-2] == "api" && segs[n-1] == "capsets":
		return endpointCapSets, ""
	case n >= 4 && segs[n-4] == "api" && segs[n-3] == "capsets" && segs[n-1] == "usage" && segs[n-2] != "":
		return endpointUsage, segs[n-2]
	case n >= 4 && segs[n-4] == "api" && segs[n-3] == "capsets" && segs[n-1] == "records" && segs[n-2] != "":
		return endpointRecords, segs[n-2]
	}
	for _, s := range segs {
		if s == "api" {
			return endpointUnknown, ""
		}
	}
	return endpointPage, ""
}

func (c *Console) shows(name string) bool { return c.shown == nil || c.shown[name] }

// capSetList is the body of GET .../api/capsets.
type capSetList struct {
	ReadOnly bool          `json:"read_only"`
	CapSets  []capSetEntry `json:"capsets"`
}

type capSetEntry struct {
	Name       string   `json:"name"`
	Store      string   `json:"store"`
	DryRun     bool     `json:"dry_run"`
	Dimensions []string `json:"dimensions"`
	Zoned      bool     `json:"zoned"`
	// Inputs are the values its answers depend on beyond the dimensions
	// (zone, limit and cost placeholders), each a query parameter.
	Inputs []input      `json:"inputs"`
	Exempt *exemptEntry `json:"exempt,omitempty"`
	Rules  []ruleEntry  `json:"rules"`
	// Missing lists the dimensions no request had a value for in the
	// last minute (on_missing skip): the rules by them capped nothing.
	Missing []missingEntry `json:"missing,omitempty"`
	// Conflict says why the entry has no rules: the running config has
	// several unnamed cap sets with other settings under this name, which
	// the admin API answers 409 for.
	Conflict string `json:"conflict,omitempty"`
}

// missingEntry is a dimension never found, its placeholders in words.
type missingEntry struct {
	Dimension string `json:"dimension"`
	Words     string `json:"words"`
}

// exemptEntry is a cap set's exempt subdirective, its placeholder also
// in words.
type exemptEntry struct {
	Placeholder string   `json:"placeholder"`
	Words       string   `json:"words"`
	Values      []string `json:"values"`
}

type ruleEntry struct {
	Rule   string   `json:"rule"`
	By     []string `json:"by"`
	Limit  int64    `json:"limit"`
	Window string   `json:"window"`
	// DryRun marks a shadow rule: it never refuses a send.
	DryRun bool `json:"dry_run,omitempty"`
	// LimitFrom, ZoneFrom and CostFrom name, in words, the placeholders
	// the rule reads its limit, zone and cost from; Limit is then the
	// fallback limit (or, without one, the most a request may set), and
	// Window's zone the fallback zone.
	LimitFrom string `json:"limit_from,omitempty"`
	ZoneFrom  string `json:"zone_from,omitempty"`
	CostFrom  string `json:"cost_from,omitempty"`
}

func (c *Console) list() capSetList {
	c.warnUnknownCapSets()
	return capSetList{ReadOnly: c.ReadOnly, CapSets: capSetEntries(c.shows)}
}

// conflictText is a conflicting name's entry: what is wrong and the fix.
var conflictText = "several frequency_cap cap sets without a name, with other settings, share this name: name each cap set (frequency_cap's name) to see and ask about each"

// capSetEntries describes every cap set of the running config that shows
// admits, by name: the console's list and the admin API's.
func capSetEntries(shows func(name string) bool) []capSetEntry {
	out := []capSetEntry{}
	for _, cs := range capset.List() {
		if !shows(cs.Name) {
			continue
		}
		if _, err := capset.Lookup(cs.Name); errors.Is(err, capset.ErrSameName) {
			// One entry would show one of them as if it were the only one.
			out = append(out, capSetEntry{Name: cs.Name, Store: cs.StoreKind, Dimensions: []string{}, Inputs: []input{}, Rules: []ruleEntry{}, Conflict: conflictText})
			continue
		}
		e := capSetEntry{Name: cs.Name, Store: cs.StoreKind, DryRun: cs.DryRun, Dimensions: []string{}, Inputs: inputsOf(cs)}
		if x := cs.Exempt; x != nil {
			e.Exempt = &exemptEntry{Placeholder: x.Placeholder, Words: placeholderWords(x.Placeholder), Values: x.Values}
		}
		for _, d := range cs.Dims {
			if !d.Constant { // a rule without by asks for nothing
				e.Dimensions = append(e.Dimensions, d.Name)
			}
		}
		if cs.Missing != nil {
			for _, name := range cs.Missing() {
				e.Missing = append(e.Missing, missingEntry{Dimension: name, Words: placeholderWords(cs.Dimensions[name])})
			}
		}
		// A dimension named zone takes the zone parameter's place (see
		// AdminAPI).
		_, zoneDim := cs.Dimensions[zoneParam]
		for _, cr := range cs.Rules {
			window := cr.Rule.Window.String()
			if q := cr.Rule.Quiet; q != nil {
				window = q.String(nil)
			}
			re := ruleEntry{Rule: cr.Rule.Name, By: askedBy(cs, &cr), Limit: cr.Rule.Limit, Window: window, DryRun: cr.Shadow}
			if cr.LimitExpr != "" {
				re.LimitFrom = placeholderWords(cr.LimitExpr)
				if cr.LimitFallback > 0 {
					re.Limit = cr.LimitFallback
				}
			}
			if cr.ZoneExpr != "" {
				re.ZoneFrom = placeholderWords(cr.ZoneExpr)
			}
			if cr.CostExpr != "" {
				re.CostFrom = placeholderWords(cr.CostExpr)
			}
			e.Rules = append(e.Rules, re)
			e.Zoned = e.Zoned || (cr.ZoneExpr != "" && !zoneDim)
		}
		out = append(out, e)
	}
	return out
}

// user names the request's authenticated user: {http.auth.user.id}, or
// the UserHeader field; "" when there is none.
func (c *Console) user(r *http.Request) string {
	if repl, ok := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer); ok {
		if user, _ := repl.GetString("http.auth.user.id"); user != "" {
			return user
		}
	}
	if c.UserHeader != "" {
		return r.Header.Get(c.UserHeader)
	}
	return ""
}

// howToAuthenticate is what a console without authentication in front
// says to do.
const howToAuthenticate = "the support console answers only authenticated users: put basic_auth (or forward_auth with copy_headers and the console's user_header) in front of frequency_cap_console, or add public inside it for a console on a private network"

// unauthenticated answers a request that carries no authenticated user:
// 403, as a page for a browser on the page's path and as a JSON reason
// under api/.
func unauthenticated(w http.ResponseWriter, endpoint consoleEndpoint) error {
	if endpoint != endpointPage {
		return (&reply.Failure{Status: http.StatusForbidden, Reason: howToAuthenticate}).Write(w)
	}
	page := []byte(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>Support console: authentication needed</title></head>
<body style="font-family:system-ui,sans-serif;max-width:40rem;margin:2rem auto;padding:0 1rem;line-height:1.5">
<h1>Authentication needed</h1>
<p>This support console shows who was messaged how often and can lift caps, so it answers only
authenticated users, and nothing authenticated this request.</p>
<p>Put <code>basic_auth</code> in front of it in the Caddyfile:</p>
<pre>basic_auth /support/* {
	alice &lt;hash from caddy hash-password&gt;
}
frequency_cap_console /support/*</pre>
<p>or <code>forward_auth</code> with <code>copy_headers Remote-User</code> and
<code>user_header Remote-User</code> inside <code>frequency_cap_console</code>. For a console on a
private network, <code>public</code> inside <code>frequency_cap_console</code> serves everyone.</p>
</body></html>
`)
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Content-Length", strconv.Itoa(len(page)))
	h.Set("Cache-Control", "no-store")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	w.WriteHeader(http.StatusForbidden)
	_, err := w.Write(page)
	return err
}

// consolePage is the console: its style and script are inline, so it
// loads nothing else.
//
//go:embed console.html
var consolePage []byte

// consoleCSP allows the page's own inline style and script (by hash) and
// requests to its own origin, nothing else: even if some value slipped
// past the script's escaping, the browser would run no script of it.
var consoleCSP = func() string {
	hash := func(tag string) string {
		page := string(consolePage)
		_, rest, ok1 := strings.Cut(page, "<"+tag+">")
		body, _, ok2 := strings.Cut(rest, "</"+tag+">")
		if !ok1 || !ok2 {
			panic("console.html has no <" + tag + "> element")
		}
		sum := sha256.Sum256([]byte(body))
		return "'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
	}
	return "default-src 'none'; style-src " + hash("style") + "; script-src " + hash("script") +
		"; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
}()

// Interface guards.
var (
	_ caddy.Provisioner           = (*Console)(nil)
	_ caddy.Validator             = (*Console)(nil)
	_ caddyhttp.MiddlewareHandler = (*Console)(nil)
	_ caddyfile.Unmarshaler       = (*Console)(nil)
)

// askedBy is the dimensions a rule counts by that a look-up gives: all of
// them but the constant one of a rule without by (one count over every
// send), which is [] then.
func askedBy(cs *capset.CapSet, cr *capset.Rule) []string {
	by := []string{}
	for _, di := range cr.Dims {
		if d := cs.Dims[di]; !d.Constant {
			by = append(by, d.Name)
		}
	}
	return by
}
