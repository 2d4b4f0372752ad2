package caddymodule

import (
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/freqcap/caddy-freqcap/caddymodule/internal/reply"
	"github.com/freqcap/caddy-freqcap/caddymodule/internal/zones"
	"github.com/freqcap/caddy-freqcap/internal/jsonbatch"
	"github.com/freqcap/caddy-freqcap/limiter"
)

// entryText is an expression's value for each entry of a batch: one text
// for all, or (perEntry) each entry's own, from each or, for the batch
// dimension, from the entries themselves (not copied: a batch is
// hundreds of them).
type entryText struct {
	all      string
	each     []jsonbatch.Value
	ents     []jsonbatch.Entry
	perEntry bool
}

func (t *entryText) at(i int) string {
	switch {
	case t.each != nil:
		return t.each[i].Text
	case t.ents != nil:
		return t.ents[i].Text
	}
	return t.all
}

// unframe empties each text that is only frame, the text around the
// expression's placeholders (see Handler.unframed): it read nothing.
func (t *entryText) unframe(frame string) {
	switch {
	case frame == "":
	case t.each != nil:
		for i := range t.each {
			if t.each[i].Text == frame {
				t.each[i] = jsonbatch.Value{Kind: jsonbatch.Missing}
			}
		}
	case t.ents == nil && t.all == frame:
		t.all = ""
	}
}

// found reports whether any of n entries has a text.
func (t *entryText) found(n int) bool {
	if !t.perEntry {
		return t.all != ""
	}
	for i := range n {
		if t.at(i) != "" {
			return true
		}
	}
	return false
}

// firstMissing returns the first entry whose text is empty, or -1.
func (t *entryText) firstMissing(n int) int {
	for i := range n {
		if t.at(i) == "" {
			return i
		}
	}
	return -1
}

// textOf resolves expr for a batch: per entry when p (its wildcard path)
// is set, else once by the replacer.
func textOf(repl *caddy.Replacer, b *jsonbatch.Batch, p *jsonbatch.Path, expr string) entryText {
	if p == nil {
		if expr == "" {
			return entryText{}
		}
		return entryText{all: repl.ReplaceAll(expr, "")}
	}
	// With no entry there is no entry without a value: not the one text
	// for all, which would be empty and read as missing.
	vs, _ := b.Resolve(p) // compileBatch checked p against the batch path
	return entryText{each: vs, perEntry: true}
}

// batchRequests makes each entry's request (reqs) and, when a quiet
// range holds some entry, each entry's quiet rules that hold it (quiet,
// else nil). A value missing under on_missing reject is a 400 naming the
// dimension and, for a per-entry value, the entry; under skip the rules
// that need it are left out for that entry, as for a single send.
//
// A batch costs a few allocations, not several per entry: the checks
// share one backing array, and so do their Values, where each entry's
// dimension values are laid out once, in the order of Handler.dims (its
// row), and a rule whose dimensions are a run of that order
// (batchConfig.rowSpan: the seed's rules are) takes its Values from the
// row rather than a copy.
func (h *Handler) batchRequests(repl *caddy.Replacer, b *jsonbatch.Batch) ([]limiter.Request, [][]quietHit, *reply.Failure) {
	bc := h.batch
	n := len(b.Entries)
	vals := make([]entryText, len(h.dims))
	for di, d := range h.dims {
		if di == bc.dim {
			vals[di] = entryText{ents: b.Entries, perEntry: true}
		} else if bc.templates[di] != nil {
			vals[di] = templateText(repl, b, bc.templates[di])
		} else {
			vals[di] = textOf(repl, b, bc.dims[di], d.Expr)
		}
		if h.keying[di] {
			if t := bc.templates[di]; t != nil {
				if f := keyTemplateParts(b, d.Name, t); f != nil {
					return nil, nil, f
				}
			}
			if f := keyEntries(b, d.Name, &vals[di]); f != nil {
				return nil, nil, f
			}
		}
		vals[di].unframe(h.frames[di])
		if vals[di].found(n) {
			h.watch.found(di)
		}
		if f := h.checkMissing(b, di, &vals[di]); f != nil {
			return nil, nil, f
		}
	}
	// Counted once its limit and zone placeholders are read (below): the
	// check this request may make sees its reads too.
	defer h.watch.request(time.Now())
	var exempt entryText
	if h.exempt != nil {
		exempt = textOf(repl, b, bc.exempt, h.Exempt.Placeholder)
	}
	costs := make([]entryText, len(h.rules))
	zones := make([]entryText, len(h.rules))
	limits := make([]entryText, len(h.rules))
	width := len(h.dims) // the row, then the rules' own Values
	for ri := range h.rules {
		cr := &h.rules[ri]
		costs[ri] = textOf(repl, b, bc.costs[ri], cr.costExpr)
		zones[ri] = textOf(repl, b, bc.zones[ri], cr.zoneExpr)
		limits[ri] = textOf(repl, b, bc.limits[ri], cr.limitExpr)
		if bc.rowSpan[ri][0] < 0 {
			width += len(cr.dims)
		}
	}

	var zoneMemo batchZones
	var quiet [][]quietHit
	reqs := make([]limiter.Request, n)
	checks := make([]limiter.Check, 0, n*len(h.rules))
	values := make([]string, 0, n*width)
	now := time.Now()
	for i := range reqs {
		req := &reqs[i]
		req.Exempt = h.exempt != nil && h.exempt[exempt.at(i)]
		first := len(checks)
		for di := range vals {
			values = append(values, vals[di].at(i))
		}
		row := values[len(values)-len(vals) : len(values) : len(values)]
	rules:
		for ri := range h.rules {
			cr := &h.rules[ri]
			var vs []string
			if span := bc.rowSpan[ri]; span[0] >= 0 {
				vs = row[span[0]:span[1]:span[1]]
				for _, v := range vs {
					if v == "" {
						continue rules
					}
				}
			} else {
				from := len(values)
				for _, di := range cr.dims {
					v := row[di]
					if v == "" {
						values = values[:from]
						continue rules
					}
					values = append(values, v)
				}
				vs = values[from:len(values):len(values)]
			}
			c := limiter.Check{Rule: cr.rule, Values: vs, Cost: cr.cost, Shadow: cr.shadow}
			if cr.zoneExpr != "" {
				c.Zone = zoneMemo.of(zones[ri].at(i))
				h.watch.readFallback(cr.zoneWatch, c.Zone != nil)
			}
			if q := cr.rule.Quiet; q != nil {
				if until, in := q.Until(now, c.Zone); in {
					if quiet == nil {
						quiet = make([][]quietHit, n)
					}
					quiet[i] = append(quiet[i], quietHit{check: c, until: until})
				}
				continue
			}
			var fail *reply.Failure
			// The entry's path is made only for a 400 that names it.
			if cr.costExpr != "" {
				if c.Cost, fail = cr.costOf(costs[ri].at(i), ""); fail != nil {
					_, fail = cr.costOf(costs[ri].at(i), " at "+b.EntryPath(i))
					return nil, nil, fail
				}
			}
			if cr.limitExpr != "" {
				var given bool
				if c.Limit, given, fail = cr.limitOf(limits[ri].at(i), ""); fail != nil {
					_, _, fail = cr.limitOf(limits[ri].at(i), " at "+b.EntryPath(i))
					return nil, nil, fail
				}
				h.watch.readFallback(cr.limitWatch, given)
			}
			checks = append(checks, c)
		}
		req.Checks = checks[first:len(checks):len(checks)]
	}
	return reqs, quiet, nil
}

// checkMissing counts a dimension with a missing value in the batch (once
// per request, as for a single send) and, under on_missing reject,
// returns the 400 naming it and the first entry without it.
func (h *Handler) checkMissing(b *jsonbatch.Batch, di int, t *entryText) *reply.Failure {
	where := ""
	switch {
	case !t.perEntry && t.all == "":
		where = "" // the same for every entry
	case !t.perEntry:
		return nil
	default:
		i := t.firstMissing(len(b.Entries))
		if i < 0 {
			return nil
		}
		where = " at " + b.EntryPath(i)
	}
	if di == h.batch.dim && len(b.Missing) > 0 {
		// serveBatch counted this request already, for the places
		// where the batch path found nothing (under skip: else it
		// refused the request then).
		return nil
	}
	h.metrics.missing[di].Inc()
	if !h.rejectsMissing(di) {
		return nil
	}
	name := h.dims[di].Name
	return &reply.Failure{Status: http.StatusBadRequest, Reason: "missing value for dimension " + name + where, Dimension: name}
}

// batchZones resolves the zones a batch's entries name, each name once per
// request: an unknown name is not cached across requests (see
// requestZone) and costs tens of microseconds to look up, which a batch of
// a thousand entries naming junk zones would pay a thousand times.
type batchZones struct {
	last string
	zone *time.Location
	seen map[string]*time.Location
}

func (z *batchZones) of(name string) *time.Location {
	if name == z.last && z.seen != nil {
		return z.zone // the usual batch: one zone for many entries in a row
	}
	if z.seen == nil {
		z.seen = make(map[string]*time.Location)
	}
	zone, ok := z.seen[name]
	if !ok {
		zone = zones.OfRequest(name)
		z.seen[name] = zone
	}
	z.last, z.zone = name, zone
	return zone
}

// missingEntry is the 400 of a batch whose dimension found nothing at
// miss. When a wildcard met something other than an array, the body is
// not of the shape the path expects, and the answer says so rather than
// blame a missing value.
func missingEntry(name, expr string, miss jsonbatch.Miss) *reply.Failure {
	if miss.NotArray == jsonbatch.Missing {
		return &reply.Failure{Status: http.StatusBadRequest, Reason: "missing value for dimension " + name + " at " + miss.Path, Dimension: name}
	}
	where := "the body"
	if i := strings.Index(miss.Path, ".*"); i > 0 {
		where = miss.Path[:i]
	} else if i < 0 && !strings.HasPrefix(miss.Path, "*") {
		where = miss.Path
	}
	return &reply.Failure{Status: http.StatusBadRequest, Dimension: name,
		Reason: fmt.Sprintf("the body is not of the shape dimension %s expects (%s): %s is %s %s where * needs an array", name, expr, where, article(miss.NotArray), miss.NotArray)}
}

// article is "a" or "an" before a kind's name.
func article(k jsonbatch.Kind) string {
	if k == jsonbatch.Object || k == jsonbatch.Array {
		return "an"
	}
	return "a"
}
