package caddymodule

import (
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"

	"github.com/freqcap/caddy-freqcap/internal/jsonbatch"
	"github.com/freqcap/caddy-freqcap/limiter"
)

// batchEntry is one recipient entry's request, made as Handler.request
// makes a single send's, with the quiet rules that hold it.
type batchEntry struct {
	req   limiter.Request
	quiet []quietHit
}

// entryText is an expression's value for each entry of a batch: one text
// for all (each nil), or each entry's own.
type entryText struct {
	all  string
	each []jsonbatch.Value
}

func (t *entryText) at(i int) string {
	if t.each != nil {
		return t.each[i].Text
	}
	return t.all
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
	if len(b.Entries) == 0 {
		// No entry, so no entry without a value: not the one text for all,
		// which would be empty and read as missing.
		return entryText{each: []jsonbatch.Value{}}
	}
	vs, _ := b.Resolve(p) // compileBatch checked p against the batch path
	return entryText{each: vs}
}

// batchRequests makes each entry's request. A value missing under
// on_missing reject is a 400 naming the dimension and, for a per-entry
// value, the entry; under skip the rules that need it are left out for
// that entry, as for a single send. Rules' Values share one backing
// array, so that a batch costs a few allocations, not one per check.
func (h *Handler) batchRequests(repl *caddy.Replacer, b *jsonbatch.Batch) ([]batchEntry, *failure) {
	bc := h.batch
	n := len(b.Entries)
	vals := make([]entryText, len(h.dims))
	for di, d := range h.dims {
		if di == bc.dim {
			each := make([]jsonbatch.Value, n)
			for i := range b.Entries {
				each[i] = b.Entries[i].Value
			}
			vals[di] = entryText{each: each}
		} else {
			vals[di] = textOf(repl, b, bc.dims[di], d.expr)
		}
		if f := h.checkMissing(b, di, &vals[di]); f != nil {
			return nil, f
		}
	}
	var exempt entryText
	if h.exempt != nil {
		exempt = textOf(repl, b, bc.exempt, h.Exempt.Placeholder)
	}
	costs := make([]entryText, len(h.rules))
	zones := make([]entryText, len(h.rules))
	limits := make([]entryText, len(h.rules))
	width := 0
	for ri := range h.rules {
		cr := &h.rules[ri]
		costs[ri] = textOf(repl, b, bc.costs[ri], cr.costExpr)
		zones[ri] = textOf(repl, b, bc.zones[ri], cr.zoneExpr)
		limits[ri] = textOf(repl, b, bc.limits[ri], cr.limitExpr)
		width += len(cr.dims)
	}

	var zoneMemo batchZones
	entries := make([]batchEntry, n)
	checks := make([]limiter.Check, 0, n*len(h.rules))
	values := make([]string, 0, n*width)
	now := time.Now()
	for i := range entries {
		e := &entries[i]
		e.req.Exempt = h.exempt != nil && h.exempt[exempt.at(i)]
		first := len(checks)
	rules:
		for ri := range h.rules {
			cr := &h.rules[ri]
			from := len(values)
			for _, di := range cr.dims {
				v := vals[di].at(i)
				if v == "" {
					values = values[:from]
					continue rules
				}
				values = append(values, v)
			}
			c := limiter.Check{Rule: cr.rule, Values: values[from:len(values):len(values)], Cost: cr.cost, Shadow: cr.shadow}
			if cr.zoneExpr != "" {
				c.Zone = zoneMemo.of(zones[ri].at(i))
			}
			if q := cr.rule.Quiet; q != nil {
				if until, in := q.Until(now, c.Zone); in {
					e.quiet = append(e.quiet, quietHit{check: c, until: until})
				}
				continue
			}
			var fail *failure
			// The entry's path is made only for a 400 that names it.
			if cr.costExpr != "" {
				if c.Cost, fail = cr.costOf(costs[ri].at(i), ""); fail != nil {
					_, fail = cr.costOf(costs[ri].at(i), " at "+b.EntryPath(i))
					return nil, fail
				}
			}
			if cr.limitExpr != "" {
				if c.Limit, fail = cr.limitOf(limits[ri].at(i), ""); fail != nil {
					_, fail = cr.limitOf(limits[ri].at(i), " at "+b.EntryPath(i))
					return nil, fail
				}
			}
			checks = append(checks, c)
		}
		e.req.Checks = checks[first:len(checks):len(checks)]
	}
	return entries, nil
}

// checkMissing counts a dimension with a missing value in the batch (once
// per request, as for a single send) and, under on_missing reject,
// returns the 400 naming it and the first entry without it.
func (h *Handler) checkMissing(b *jsonbatch.Batch, di int, t *entryText) *failure {
	where := ""
	switch {
	case t.each == nil && t.all == "":
		where = "" // the same for every entry
	case t.each == nil:
		return nil
	default:
		i := 0
		for i < len(t.each) && t.each[i].Text != "" {
			i++
		}
		if i == len(t.each) {
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
	if h.OnMissing != OnMissingReject {
		return nil
	}
	name := h.dims[di].name
	return &failure{status: http.StatusBadRequest, reason: "missing value for dimension " + name + where, dimension: name}
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
		zone = requestZone(name)
		z.seen[name] = zone
	}
	z.last, z.zone = name, zone
	return zone
}
