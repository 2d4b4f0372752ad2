package caddymodule

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/freqcap/caddy-freqcap/internal/jsonbatch"
	"github.com/freqcap/caddy-freqcap/limiter"
)

// batchConfig is what compileBatch makes of the wildcard paths. The
// handler has one only when some dimension's {json.*} path holds a "*":
// without it, no request goes near the batch path.
type batchConfig struct {
	// path is the batch dimension's: each value it names is a recipient
	// entry. dim is its index in Handler.dims.
	path *jsonbatch.Path
	dim  int
	// dims holds, by index of Handler.dims, the wildcard path of a
	// dimension resolved per entry, or nil for one resolved once per
	// request by the replacer (and for the batch dimension itself).
	dims []*jsonbatch.Path
	// templates holds, by index of Handler.dims, a dimension that runs
	// several wildcard paths of each entry together (batch_template.go),
	// or nil.
	templates [][]templatePart
	// costs, zones and limits hold, by index of Handler.rules, the
	// wildcard path of that expression, or nil.
	costs, zones, limits []*jsonbatch.Path
	// exempt is the exempt placeholder's wildcard path, or nil.
	exempt *jsonbatch.Path
	// rulePos is each rule's index in Handler.rules, for the quota
	// headers' combined view.
	rulePos map[*limiter.Rule]int
	// rowSpan holds, by index of Handler.rules, the run [lo, hi) of
	// Handler.dims that the rule's dimensions are, in order, or {-1, -1}
	// when they are none: such a rule's checks take their Values out of
	// each entry's row of dimension values (see batchRequests).
	rowSpan [][2]int
	drop    bool
	max     int
}

// compileBatch finds the batch dimension and checks every other wildcard
// expression against it. The batch dimension is the first dimension with
// a wildcard in the order the rules name dimensions (rules in order, each
// rule's by in order): a JSON config's dimensions are a map, whose order
// is lost, while the rules are a list, so this order is the same in both
// forms. Put the recipient first in the first rule's by.
func (h *Handler) compileBatch() error {
	var bc *batchConfig
	paths := make([]*jsonbatch.Path, len(h.dims))
	templates := make([][]templatePart, len(h.dims))
	for i, d := range h.dims {
		if _, alts := h.DimensionAlternatives[d.Name]; !alts {
			t, err := entryTemplate(h.Dimensions[d.Name])
			if err != nil {
				return fmt.Errorf("dimension %s: %w", d.Name, err)
			}
			if t != nil {
				if bc == nil {
					return fmt.Errorf("dimension %s: %q reads a wildcard path within other text or beside other paths, which the batch dimension (the first with a wildcard, in the order the rules name dimensions) cannot: its entries are the values of one path", d.Name, h.Dimensions[d.Name])
				}
				templates[i] = t
				continue
			}
		}
		p, err := h.dimBatchPath(d.Name)
		if err != nil {
			return fmt.Errorf("dimension %s: %w", d.Name, err)
		}
		if p != nil && bc == nil {
			bc = &batchConfig{path: p, dim: i}
			continue
		}
		paths[i] = p
	}
	if bc == nil {
		return h.checkNoBatch()
	}
	for i, p := range paths {
		if p == nil {
			// (A template's parts read once a request too.)
			if i != bc.dim && bc.path.StartsWild() {
				if err := notInAnArray(h.Dimensions[h.dims[i].Name], h.dimensionText(h.dims[bc.dim].Name)); err != nil {
					return fmt.Errorf("dimension %s: %w", h.dims[i].Name, err)
				}
			}
			continue
		}
		if err := bc.path.CheckDimension(p); err != nil {
			return fmt.Errorf("dimension %s: %w", h.dims[i].Name, err)
		}
	}
	for i, t := range templates {
		for _, part := range t {
			if part.path == nil {
				continue
			}
			if err := bc.path.CheckDimension(part.path); err != nil {
				return fmt.Errorf("dimension %s: %w", h.dims[i].Name, err)
			}
		}
	}
	bc.dims, bc.templates = paths, templates
	// The dropped entries' paths go into a header as sf-strings; a
	// concrete path adds only digits to the pattern.
	if _, err := jsonbatch.SFStringList([]string{bc.path.String()}); err != nil {
		return fmt.Errorf("dimension %s: %w", h.dims[bc.dim].Name, err)
	}

	perEntry := func(what, expr string) (*jsonbatch.Path, error) {
		p, err := wildcardPath(expr)
		if err == nil && p != nil {
			err = bc.path.CheckDimension(p)
		}
		if err != nil {
			return nil, fmt.Errorf("%s: %w", what, err)
		}
		return p, nil
	}
	n := len(h.rules)
	bc.costs, bc.zones, bc.limits = make([]*jsonbatch.Path, n), make([]*jsonbatch.Path, n), make([]*jsonbatch.Path, n)
	bc.rulePos = make(map[*limiter.Rule]int, n)
	bc.rowSpan = make([][2]int, n)
	for i := range h.rules {
		cr := &h.rules[i]
		bc.rulePos[cr.rule] = i
		bc.rowSpan[i] = dimsRun(cr.dims)
		var err error
		if bc.costs[i], err = perEntry("rule "+cr.rule.Name+": cost", cr.costExpr); err != nil {
			return err
		}
		if bc.zones[i], err = perEntry("rule "+cr.rule.Name+": zone", cr.zoneExpr); err != nil {
			return err
		}
		if bc.limits[i], err = perEntry("rule "+cr.rule.Name+": limit", cr.limitExpr); err != nil {
			return err
		}
	}
	if h.Exempt != nil {
		var err error
		if bc.exempt, err = perEntry("exempt", h.Exempt.Placeholder); err != nil {
			return err
		}
	}

	if h.Batch == "" {
		h.Batch = BatchReject
	}
	if h.MaxBatch == 0 {
		h.MaxBatch = DefaultMaxBatch
	}
	switch {
	case h.Batch != BatchReject && h.Batch != BatchDrop:
		return fmt.Errorf("batch must be reject or drop, not %q", h.Batch)
	case h.MaxBatch < 1 || h.MaxBatch > limiter.MaxBatch:
		return fmt.Errorf("max_batch must be 1 to %d, not %d", limiter.MaxBatch, h.MaxBatch)
	case h.Splice != "" && h.Splice != SpliceExpo:
		return fmt.Errorf("splice must be expo, not %q", h.Splice)
	case h.Splice != "" && h.Batch != BatchDrop:
		return fmt.Errorf("splice %s needs batch drop (only dropped recipients are spliced back)", h.Splice)
	}
	bc.drop, bc.max = h.Batch == BatchDrop, h.MaxBatch
	h.batch = bc
	return nil
}

// dimsRun returns [lo, hi) when dims are lo, lo+1, ..., hi-1, else
// {-1, -1} (also for no dims: such a rule has no values to share).
func dimsRun(dims []int) [2]int {
	if len(dims) == 0 {
		return [2]int{-1, -1}
	}
	for k, di := range dims {
		if di != dims[0]+k {
			return [2]int{-1, -1}
		}
	}
	return [2]int{dims[0], dims[0] + len(dims)}
}

// checkNoBatch refuses the batch settings, and wildcards in costs, zones,
// limits and exempt, on a handler without a batch dimension: they would
// silently mean nothing.
func (h *Handler) checkNoBatch() error {
	if h.Batch != "" || h.MaxBatch != 0 || h.Splice != "" {
		return fmt.Errorf("batch, max_batch and splice need a batch dimension (a {json.*} path with a * segment, such as {json.*.to})")
	}
	exprs := []string{}
	if h.Exempt != nil {
		exprs = append(exprs, h.Exempt.Placeholder)
	}
	for _, cr := range h.rules {
		exprs = append(exprs, cr.costExpr, cr.zoneExpr, cr.limitExpr)
	}
	for _, e := range exprs {
		if p, err := wildcardPath(e); err != nil || p != nil {
			return fmt.Errorf("%q has a wildcard path, but no dimension is a batch dimension (a {json.*} path with a * segment)", e)
		}
	}
	return nil
}

// wildcardPath returns the path of expr when it is a {json.<path>}
// placeholder whose path has a "*" segment, nil when expr has no such
// placeholder, and an error when one is mixed with other text (a batch's
// values are read from the body per entry, not by the replacer, so the
// placeholder must be the whole expression) or the path does not parse.
func wildcardPath(expr string) (*jsonbatch.Path, error) {
	const open = "{json."
	for rest := expr; ; {
		i := strings.Index(rest, open)
		if i < 0 {
			return nil, nil
		}
		rest = rest[i+len(open):]
		end := strings.IndexByte(rest, '}')
		if end < 0 {
			return nil, nil
		}
		path := rest[:end]
		if !hasWildcard(path) {
			rest = rest[end:]
			continue
		}
		if strings.TrimSpace(expr) != open+path+"}" {
			return nil, fmt.Errorf("%q: a {json.*} path with a * segment must be the whole expression", expr)
		}
		p, err := jsonbatch.ParsePath(path)
		if err != nil {
			return nil, fmt.Errorf("%q: %w", expr, err)
		}
		return p, nil
	}
}

// notInAnArray refuses a dimension that reads a member of the body
// ({json.body}) beside a batch dimension that reads the body as an array
// of messages ({json.*.to}; an object as one message): in an array body it
// is never found, so the dimension read only the object form (under
// on_missing skip its rules capped array sends not at all). An index
// ({json.0.body}) reads an array.
func notInAnArray(expr, batch string) error {
	for _, name := range bodyPlaceholders {
		if name == "form" {
			continue
		}
		open := "{" + name + "."
		for rest := expr; ; {
			i := strings.Index(rest, open)
			if i < 0 {
				break
			}
			escaped := i > 0 && rest[i-1] == '\\' // text, not a placeholder
			rest = rest[i+len(open):]
			if escaped {
				continue
			}
			path, _, _ := strings.Cut(rest, "}")
			first, _, _ := strings.Cut(path, ".")
			if n, err := strconv.Atoi(first); err == nil && n >= 0 || hasWildcard(first) {
				continue
			}
			return fmt.Errorf("%q reads the body's member %q, but the batch dimension's %s reads the body as an array of messages (an object as one message), which has no members; read it of each message: {%s.*.%s}", expr, first, batch, name, path)
		}
	}
	return nil
}

// dimensionText is a dimension as configured: its expression, or its
// alternatives.
func (h *Handler) dimensionText(name string) string {
	if alts, ok := h.DimensionAlternatives[name]; ok {
		return strings.Join(alts, " or ")
	}
	return h.Dimensions[name]
}

// hasWildcard reports whether a dotted path has a segment that is "*",
// or a filtered wildcard "*[...]".
func hasWildcard(path string) bool {
	for seg := range strings.SplitSeq(path, ".") {
		if seg == "*" || strings.HasPrefix(seg, "*[") {
			return true
		}
	}
	return false
}
