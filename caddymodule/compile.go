package caddymodule

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/freqcap/caddy-freqcap/caddymodule/internal/capset"
	"github.com/freqcap/caddy-freqcap/caddymodule/internal/zones"
	"github.com/freqcap/caddy-freqcap/internal/jsonbatch"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/lease"
)

// compiledRule is a RuleConfig made ready for requests.
type compiledRule struct {
	rule *limiter.Rule
	// dims are indices into Handler.dims, in the order of rule.By.
	dims []int
	// costExpr is the placeholder expression of the cost, or "" when the
	// cost is the constant cost.
	costExpr string
	cost     int64
	// zoneExpr is the placeholder expression of the zone, or "" when the
	// rule's zone is fixed.
	zoneExpr string
	// limitExpr is the placeholder expression of the limit, or "" when the
	// limit is rule.Limit; limitFallback is its fallback, 0 for none.
	limitExpr     string
	limitFallback int64
	// limitWatch and zoneWatch index the missing watch's fallbacks: the
	// limit and zone placeholders watched for never giving a value; -1
	// for none (fallback_watch.go).
	limitWatch, zoneWatch int
	// shadow: the rule never denies (dry_run in its block).
	shadow bool
}

// compile checks the dimensions and rules and turns them into h.dims and
// h.rules; errors name the rule or dimension at fault.
func (h *Handler) compile() error {
	names := make([]string, 0, len(h.Dimensions))
	for name, expr := range h.Dimensions {
		if err := limiter.CheckName(name); err != nil {
			return fmt.Errorf("dimension %w", err)
		}
		if strings.TrimSpace(expr) == "" {
			return fmt.Errorf("dimension %s: empty expression", name)
		}
		if err := checkDimension(name, expr); err != nil {
			return err
		}
		names = append(names, name)
	}
	for name, alts := range h.DimensionAlternatives {
		if err := limiter.CheckName(name); err != nil {
			return fmt.Errorf("dimension %w", err)
		}
		if _, dup := h.Dimensions[name]; dup {
			return fmt.Errorf("dimension %s: declared in dimensions and dimension_alternatives", name)
		}
		for _, alt := range alts {
			if err := checkDimension(name, alt); err != nil {
				return err
			}
		}
		if _, err := alternativesPath(alts); err != nil {
			return fmt.Errorf("dimension %s: %w", name, err)
		}
		names = append(names, name)
	}
	sort.Strings(names)

	used := map[string]int{}
	seen := map[string]bool{}
	h.rules = make([]compiledRule, 0, len(h.Rules))
	for i := range h.Rules {
		rc := &h.Rules[i]
		if rc.Name == "" {
			return fmt.Errorf("rule #%d has no name", i+1)
		}
		if seen[rc.Name] {
			return fmt.Errorf("rule %s: defined twice", rc.Name)
		}
		seen[rc.Name] = true
		cr, err := compileRule(rc)
		if err != nil {
			return err
		}
		for _, d := range cr.rule.By {
			global := d == globalDimension
			if !global && !h.hasDim(d) {
				return fmt.Errorf("rule %s: unknown dimension %q (declare it with dimension %s <placeholder>)", rc.Name, d, d)
			}
			idx, ok := used[d]
			if !ok {
				idx = len(h.dims)
				used[d] = idx
				dim := capset.Dimension{Name: d, Expr: h.dimExpr(d)}
				if global {
					dim = capset.Dimension{Name: d, Expr: globalValue, Constant: true}
				}
				h.dims = append(h.dims, dim)
			}
			cr.dims = append(cr.dims, idx)
		}
		h.rules = append(h.rules, cr)
	}
	for _, name := range names {
		if _, ok := used[name]; !ok && len(h.Rules) > 0 {
			return unusedDimension(name)
		}
	}

	h.skipDims = make([]bool, len(h.dims))
	for _, name := range h.SkipMissing {
		if !h.hasDim(name) {
			return fmt.Errorf("skip_missing: unknown dimension %q", name)
		}
		for i, d := range h.dims {
			if d.Name == name {
				h.skipDims[i] = true
			}
		}
	}

	var all []*limiter.Rule
	for i := range h.rules {
		if h.rules[i].rule.Quiet == nil {
			all = append(all, h.rules[i].rule)
		}
	}
	if err := limiter.CheckLogs(all); err != nil {
		return err
	}
	if err := lease.CheckRules(all); err != nil {
		return err
	}

	// Every expression a request is read with: what it needs of the body.
	var exprs []string
	for _, d := range h.dims {
		exprs = append(exprs, d.Expr)
	}
	for _, r := range h.rules {
		exprs = append(exprs, r.costExpr, r.zoneExpr, r.limitExpr)
	}
	var err error
	if h.exempt, err = compileMatch("exempt", h.Exempt); err != nil {
		return err
	}
	if h.skip, err = compileMatch("skip", h.Skip); err != nil {
		return err
	}
	for _, e := range []*ExemptConfig{h.Exempt, h.Skip} {
		if e != nil {
			exprs = append(exprs, e.Placeholder)
		}
	}
	var paths []*jsonbatch.Path
	for _, e := range exprs {
		h.needs |= needsOf(e)
		paths = append(paths, jsonPathsOf(e)...)
		h.formFields = append(h.formFields, formFieldsOf(e)...)
		read := unlowered(e)
		h.queryParams = append(h.queryParams, placeholderArgs(read, "http.request.uri.query")...)
		h.headerNames = append(h.headerNames, placeholderArgs(read, "http.request.header")...)
		h.readsPath = h.readsPath || strings.Contains(read, "{http.request.uri.path") || strings.Contains(read, "{http.request.orig_uri.path")
		h.lowers = h.lowers || read != e
	}
	h.jsonPaths = jsonbatch.NewFolds(paths)
	h.keying = h.keyingDims()
	h.frames = make([]string, len(h.dims))
	for i := range h.dims {
		h.frames[i] = frameOf(h.dims[i].Expr, h.keying[i])
		h.dims[i].Keying = h.keying[i]
		h.dims[i].Lookup = lookupForm(h.dims[i].Expr)
	}
	h.keyPaths = make([][]string, len(h.dims))
	for i, d := range h.dims {
		if h.keying[i] {
			h.keyPaths[i] = keyJSONPaths(d.Expr)
		}
	}
	if h.AnyContentType && h.needs != 0 {
		h.needs |= needAnyType
	}
	return h.compileBatch()
}

// compileRule checks one rule's own fields: limiter.Rule.Validate checks
// what the engine needs (name, dimensions, window), and this what the
// config adds.
func compileRule(rc *RuleConfig) (compiledRule, error) {
	if rc.Quiet != "" {
		if err := checkLease(rc); err != nil {
			return compiledRule{}, fmt.Errorf("rule %s: %w", rc.Name, err)
		}
		return compileQuiet(rc)
	}
	if len(rc.Days) > 0 {
		return compiledRule{}, fmt.Errorf("rule %s: days needs quiet", rc.Name)
	}
	for _, p := range []struct{ what, expr string }{{"cost", rc.Cost}, {"limit", rc.LimitPlaceholder}, {"zone", rc.Zone}} {
		if err := checkPlaceholder("rule "+rc.Name+": "+p.what, p.expr); err != nil {
			return compiledRule{}, err
		}
	}
	if err := checkLease(rc); err != nil {
		return compiledRule{}, fmt.Errorf("rule %s: %w", rc.Name, err)
	}
	if w := time.Duration(rc.Window); w < 0 {
		return compiledRule{}, fmt.Errorf("rule %s: window %s is negative; write a duration such as \"1h\"", rc.Name, w)
	} else if w != 0 && (w < time.Millisecond || w%time.Millisecond != 0) {
		// A number in a JSON config is nanoseconds: an hour meant in
		// milliseconds (3600000) would be a 3.6ms window, capping nothing.
		return compiledRule{}, fmt.Errorf("rule %s: window %s is not a whole number of milliseconds, the unit records are kept in; "+
			"write a duration such as \"1h\" (in a JSON config, a bare number is nanoseconds: 3600000 is 3.6ms)", rc.Name, w)
	}
	if slices.Contains(rc.By, globalDimension) {
		return compiledRule{}, fmt.Errorf("rule %s: by %s: the name is reserved; for one count over every send, write the rule without by", rc.Name, globalDimension)
	}
	by := rc.By
	if len(by) == 0 {
		// One count over every send: the global ceiling.
		by = []string{globalDimension}
	}
	r := &limiter.Rule{Name: rc.Name, By: by, Limit: rc.Limit, Window: limiter.Window{Duration: time.Duration(rc.Window)}, Lease: rc.Lease}
	cr := compiledRule{rule: r, cost: 1, shadow: rc.DryRun, limitWatch: -1, zoneWatch: -1}
	if rc.Calendar != "" {
		unit, err := limiter.ParseUnit(rc.Calendar)
		if err != nil {
			return compiledRule{}, fmt.Errorf("rule %s: %w", rc.Name, err)
		}
		r.Window.Unit = unit
	} else if rc.Window == 0 {
		return compiledRule{}, fmt.Errorf("rule %s: needs a window or a calendar", rc.Name)
	}
	switch {
	case rc.LimitPlaceholder != "":
		if !isPlaceholder(rc.LimitPlaceholder) {
			return compiledRule{}, fmt.Errorf("rule %s: limit_placeholder %q is not a placeholder", rc.Name, rc.LimitPlaceholder)
		}
		if rc.Limit < 0 {
			return compiledRule{}, fmt.Errorf("rule %s: fallback limit must be at least 1, not %d", rc.Name, rc.Limit)
		}
		if rc.Limit > limiter.MaxLimit {
			return compiledRule{}, fmt.Errorf("rule %s: fallback limit %d is above %d (2^40), the largest limit", rc.Name, rc.Limit, limiter.MaxLimit)
		}
		// A limit given by a placeholder is capped at the rule's Limit, which
		// is then the most any limit may be.
		cr.limitExpr, cr.limitFallback, r.Limit = rc.LimitPlaceholder, rc.Limit, limiter.MaxLimit
	case rc.Limit < 1:
		return compiledRule{}, fmt.Errorf("rule %s: limit must be at least 1, not %d", rc.Name, rc.Limit)
	}
	if err := r.Validate(); err != nil {
		return compiledRule{}, err
	}
	if rc.Calendar != "" {
		var err error
		if r.Window.Zone, cr.zoneExpr, err = ruleZone(rc); err != nil {
			return compiledRule{}, err
		}
	} else if rc.Zone != "" || rc.FallbackZone != "" {
		return compiledRule{}, fmt.Errorf("rule %s: a zone needs a calendar window", rc.Name)
	}

	switch {
	case rc.Cost == "" || rc.Cost == "1":
	case isPlaceholder(rc.Cost):
		cr.costExpr = rc.Cost
		r.Weight = rc.Cost
	default:
		n, err := strconv.ParseInt(rc.Cost, 10, 64)
		if err != nil || n < 0 || n > limiter.MaxCost {
			return compiledRule{}, fmt.Errorf("rule %s: cost %q is neither an integer from 1 to %d nor a placeholder", rc.Name, rc.Cost, limiter.MaxCost)
		}
		if n == 0 {
			return compiledRule{}, fmt.Errorf("rule %s: %s", rc.Name, zeroCost)
		}
		if n > r.Limit {
			// (A per-request limit may be larger; r.Limit is then the
			// largest there is.)
			return compiledRule{}, fmt.Errorf("rule %s: cost %d is above its limit %d, so it refuses every send; a cost takes from the limit", rc.Name, n, r.Limit)
		}
		cr.cost = n
		r.Weight = rc.Cost
	}
	return cr, nil
}

// checkLease checks what a lease needs of a rule's config: a fixed limit
// (a block is taken under one limit) and a rule that counts; the engine
// checks the rest (limiter.Rule.CheckLease). The Caddyfile reports it at
// the lease line, provisioning with the rule's name.
func checkLease(rc *RuleConfig) error {
	switch {
	case rc.Lease == 0:
		return nil
	case rc.Quiet != "":
		return errors.New("a quiet rule counts nothing to lease")
	case rc.LimitPlaceholder != "":
		return fmt.Errorf("lease needs a fixed limit, not the per-request limit %s", rc.LimitPlaceholder)
	case isPlaceholder(rc.Zone):
		// Each zone's period is a budget of its own to the lease store:
		// a block taken a zone would hold the budget up (ten zones
		// named, ten blocks of a 10-block budget), past the one block a
		// gateway the docs promise.
		return fmt.Errorf("lease needs a fixed zone, not the per-request zone %s: each zone would take a block of its own", rc.Zone)
	}
	w := limiter.Window{Duration: time.Duration(rc.Window)}
	if rc.Calendar != "" {
		w.Unit, _ = limiter.ParseUnit(rc.Calendar) // checked apart
	}
	return (&limiter.Rule{Limit: rc.Limit, Window: w, Lease: rc.Lease}).CheckLease()
}

// hasLease reports whether a rule of the handler is leased.
func (h *Handler) hasLease() bool {
	for _, cr := range h.rules {
		if cr.rule.Lease > 0 {
			return true
		}
	}
	return false
}

// compileQuiet checks a quiet rule: a range, days, a zone, and nothing
// that counts.
func compileQuiet(rc *RuleConfig) (compiledRule, error) {
	if err := limiter.CheckName(rc.Name); err != nil {
		return compiledRule{}, fmt.Errorf("rule %w", err)
	}
	if rc.Limit != 0 || rc.LimitPlaceholder != "" || rc.Window != 0 || rc.Calendar != "" || rc.Cost != "" {
		return compiledRule{}, fmt.Errorf("rule %s: quiet excludes limit, window, calendar and cost", rc.Name)
	}
	q, err := limiter.ParseQuiet(rc.Quiet, rc.Days)
	if err != nil {
		return compiledRule{}, fmt.Errorf("rule %s: %w", rc.Name, err)
	}
	cr := compiledRule{shadow: rc.DryRun, limitWatch: -1, zoneWatch: -1}
	if q.Zone, cr.zoneExpr, err = ruleZone(rc); err != nil {
		return compiledRule{}, err
	}
	// The quota headers give it q=0 and, as w, the range's length.
	cr.rule = &limiter.Rule{Name: rc.Name, By: rc.By, Quiet: &q, Window: limiter.Window{Duration: q.Length()}}
	if err := cr.rule.Validate(); err != nil {
		return compiledRule{}, err
	}
	return cr, nil
}

// ruleZone returns a calendar rule's fixed zone, or its fallback zone and
// the placeholder that names each request's zone.
func ruleZone(rc *RuleConfig) (*time.Location, string, error) {
	if isPlaceholder(rc.Zone) {
		fallback := time.UTC
		if rc.FallbackZone != "" {
			z, err := zones.Load(rc.FallbackZone)
			if err != nil {
				return nil, "", fmt.Errorf("rule %s: fallback zone: %w", rc.Name, err)
			}
			fallback = z
		}
		return fallback, rc.Zone, nil
	}
	if rc.FallbackZone != "" {
		return nil, "", fmt.Errorf("rule %s: a fallback zone needs a placeholder zone", rc.Name)
	}
	if rc.Zone == "" {
		return time.UTC, "", nil
	}
	z, err := zones.Load(rc.Zone)
	if err != nil {
		return nil, "", fmt.Errorf("rule %s: %w", rc.Name, err)
	}
	return z, "", nil
}

// isPlaceholder reports whether s holds a placeholder to resolve per request.
func isPlaceholder(s string) bool { return strings.Contains(s, "{") }

// matchExamples name a placeholder for exempt's and skip's errors.
var matchExamples = map[string]string{"exempt": "{json.priority}", "skip": "{json.validate_only}"}

// checkMatchPlaceholder checks exempt's or skip's (what) placeholder, in
// a Caddyfile and a JSON config alike. Text without a placeholder (a JSON
// config's "json.priority") is the same for every request, so it would
// exempt or skip all of them or none; a constant placeholder ({env.*})
// does so on purpose, a switch per deployment, and is allowed. A skip is
// the whole request's: a wildcard path names a batch's entries, which
// the replacer does not read, so it would never match.
func checkMatchPlaceholder(what, expr string) error {
	if !isPlaceholder(expr) {
		return fmt.Errorf("%s %q is not a placeholder such as %s", what, expr, matchExamples[what])
	}
	if err := checkPlaceholder(what, expr); err != nil {
		return err
	}
	if t := strings.TrimSpace(expr); t != expr {
		// A value is compared as read, white space and all: a quoted
		// "{json.v} " matches only a value that ends in a space.
		return fmt.Errorf("%s %q has white space around its placeholder, so only values carrying it too would match; write %q", what, expr, t)
	}
	if p, err := wildcardPath(expr); what == "skip" && (err != nil || p != nil) {
		return fmt.Errorf("skip %q reads a wildcard path, but a skip is the whole request's and reads one value; name one field, such as {json.validate_only}", expr)
	}
	return nil
}

// compileMatch checks exempt's or skip's (what) config and returns its
// values as a set; nil for none.
func compileMatch(what string, e *ExemptConfig) (map[string]bool, error) {
	if e == nil {
		return nil, nil
	}
	if strings.TrimSpace(e.Placeholder) == "" || len(e.Values) == 0 {
		return nil, fmt.Errorf("%s needs a placeholder and at least one value", what)
	}
	if err := checkMatchPlaceholder(what, e.Placeholder); err != nil {
		return nil, err
	}
	if err := checkMatchValues(what, e.Values); err != nil {
		return nil, err
	}
	set := make(map[string]bool, len(e.Values))
	for _, v := range e.Values {
		set[v] = true
	}
	return set, nil
}
