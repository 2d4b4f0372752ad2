package caddymodule

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// This file answers "what do you hold about this person?" and "forget all
// of it" (GET and DELETE .../records?recipient=+15550100): where a usage
// query names every dimension of the rules it reads, a records query
// names one value and lists every log the store holds under it, for every
// rule keyed by that dimension: the recipient's own counts and one log for
// each content, channel or campaign she was sent (a content long enough
// to be hashed in the key is shown by its hash). A rule keys its records
// by its first dimension, so rules that list the dimension later (by
// campaign recipient) are kept under another key; the answer names them
// in "elsewhere" rather than scan the store for them.

// recordsAnswer is the body of a GET of records.
type recordsAnswer struct {
	Name      string      `json:"name"`
	Now       string      `json:"now"`
	Dimension string      `json:"dimension"`
	Value     string      `json:"value"`
	Rules     []ruleUsage `json:"rules"`
	Elsewhere []elsewhere `json:"elsewhere"`
}

// elsewhere is a rule over the dimension whose records another of its
// dimensions keys: a usage query giving all its dimensions reads them.
type elsewhere struct {
	Rule    string   `json:"rule"`
	By      []string `json:"by"`
	KeyedBy string   `json:"keyed_by"`
}

// recordsReset is the body of a DELETE of records.
type recordsReset struct {
	Name      string      `json:"name"`
	Dimension string      `json:"dimension"`
	Value     string      `json:"value"`
	Reset     []resetLog  `json:"reset"`
	Elsewhere []elsewhere `json:"elsewhere"`
}

// resetLog is one log a DELETE of records forgot, with the rules it held.
type resetLog struct {
	Rules  []string          `json:"rules"`
	Values map[string]string `json:"values"`
}

// serveRecords answers GET and DELETE of .../records for the cap set
// named name, as serveUsage does for .../usage.
func serveRecords(w http.ResponseWriter, r *http.Request, name, via string, fields ...zap.Field) error {
	cs, err := supportTarget(w, r, name)
	if cs == nil {
		return err
	}
	q, fail := cs.recordsQuery(r.URL.RawQuery)
	if fail != nil {
		return fail.write(w)
	}
	lister, ok := cs.store.(limiter.Lister)
	if !ok {
		return (&failure{status: http.StatusNotImplemented, reason: "this store cannot list what it holds"}).write(w)
	}
	ctx, cancel := context.WithTimeout(r.Context(), max(cs.timeout, usageTimeout))
	defer cancel()
	held, err := lister.Held(ctx, q.dim, q.value, time.Time{})
	if err != nil {
		return storeUnavailable(w, err)
	}
	entries := q.entries(held)
	if r.Method == http.MethodDelete {
		logs, err := q.reset(ctx, entries, via, fields)
		if err != nil {
			return storeUnavailable(w, err)
		}
		return writeJSON(w, http.StatusOK, "application/json", recordsReset{Name: cs.name, Dimension: q.dim, Value: q.value, Reset: logs, Elsewhere: q.elsewhere()})
	}
	now, rules, err := cs.usageOf(ctx, entries)
	if err != nil {
		return storeUnavailable(w, err)
	}
	return writeJSON(w, http.StatusOK, "application/json", recordsAnswer{Name: cs.name, Now: rfc3339ms(now),
		Dimension: q.dim, Value: q.value, Rules: rules, Elsewhere: q.elsewhere()})
}

// recordsQuery is a records query resolved against a cap set.
type recordsQuery struct {
	cs         *capSet
	dim, value string
	zone       *time.Location
}

// recordsQuery parses the query of a records request: one dimension that
// keys some rule's records, and optionally a zone.
func (cs *capSet) recordsQuery(raw string) (*recordsQuery, *failure) {
	p, zoneGiven, fail := cs.params(raw)
	if fail != nil {
		return nil, fail
	}
	if len(p.values) != 1 {
		return nil, &failure{status: http.StatusBadRequest, reason: fmt.Sprintf("give one dimension, whose records to list (%s keys records by %s)", cs.name, strings.Join(cs.keyingDimensions(), ", "))}
	}
	q := &recordsQuery{cs: cs, zone: p.zone}
	for dim, value := range p.values { // the one
		q.dim, q.value = dim, value
	}
	zoned := false
	for i := range cs.rules {
		cr := &cs.rules[i]
		if len(cr.rule.By) > 0 && cr.rule.By[0] == q.dim {
			zoned = zoned || cr.zoneExpr != ""
		}
	}
	if !slices.Contains(cs.keyingDimensions(), q.dim) {
		return nil, &failure{status: http.StatusBadRequest, dimension: q.dim,
			reason: fmt.Sprintf("no rule keys its records by %s (%s keys records by %s; use usage with every dimension of a rule)", q.dim, cs.name, strings.Join(cs.keyingDimensions(), ", "))}
	}
	if zoneGiven && !zoned {
		return nil, &failure{status: http.StatusBadRequest, reason: "zone: none of the rules keyed by " + q.dim + " has a per-request zone"}
	}
	return q, nil
}

// keyingDimensions are the first dimensions of the cap set's counting
// rules, sorted: the values a records query can list.
func (cs *capSet) keyingDimensions() []string {
	var out []string
	for _, cr := range cs.rules {
		if cr.rule.Quiet == nil && len(cr.rule.By) > 0 && !slices.Contains(out, cr.rule.By[0]) {
			out = append(out, cr.rule.By[0])
		}
	}
	sort.Strings(out)
	return out
}

// entries are the rules to answer for, in the cap set's order: a quiet
// rule over the dimension alone (or over nobody); a rule by the dimension
// alone, held or not (its usage is then 0); and a rule by more dimensions
// once for each log held for it.
func (q *recordsQuery) entries(held []limiter.HeldLog) []usageEntry {
	var out []usageEntry
	for i := range q.cs.rules {
		cr := &q.cs.rules[i]
		by := cr.rule.By
		switch {
		case cr.rule.Quiet != nil:
			if len(by) == 0 || (len(by) == 1 && by[0] == q.dim) {
				out = append(out, usageEntry{cr: cr, check: q.check(cr, nil)})
			}
		case by[0] != q.dim:
		case len(by) == 1:
			e := usageEntry{cr: cr, check: q.check(cr, nil)}
			for _, h := range held {
				if len(h.Values) == 0 && h.Weight == cr.rule.Weight {
					e.check.Sub = h.Sub
				}
			}
			out = append(out, e)
		default:
			others := slices.Sorted(slices.Values(by[1:]))
			for _, h := range held {
				if h.Weight == cr.rule.Weight && slices.Equal(h.Dimensions(), others) {
					out = append(out, usageEntry{cr: cr, check: q.check(cr, &h), values: h.Values, hashed: h.Hashed})
				}
			}
		}
	}
	return out
}

// check reads cr's log h (nil: the one of the dimension's value alone).
func (q *recordsQuery) check(cr *compiledRule, h *limiter.HeldLog) limiter.Check {
	c := limiter.Check{Rule: cr.rule, Values: make([]string, len(cr.rule.By)), Limit: cr.limitFallback}
	for j, d := range cr.rule.By {
		if j == 0 {
			c.Values[0] = q.value
		} else if h != nil {
			c.Values[j] = h.Values[d]
		}
	}
	if h != nil {
		c.Sub = h.Sub
	}
	if cr.zoneExpr != "" {
		c.Zone = q.zone
	}
	return c
}

// elsewhere lists the rules over the dimension that another of their
// dimensions keys.
func (q *recordsQuery) elsewhere() []elsewhere {
	out := []elsewhere{}
	for _, cr := range q.cs.rules {
		if len(cr.rule.By) > 1 && cr.rule.By[0] != q.dim && slices.Contains(cr.rule.By, q.dim) {
			out = append(out, elsewhere{Rule: cr.rule.Name, By: cr.rule.By, KeyedBy: cr.rule.By[0]})
		}
	}
	return out
}

// reset forgets every log the entries read, logs it once at info naming
// via and fields, counts one reset, and returns the logs forgotten.
func (q *recordsQuery) reset(ctx context.Context, entries []usageEntry, via string, fields []zap.Field) ([]resetLog, error) {
	var checks []limiter.Check
	bySub := map[string]int{} // index into logs
	logs := []resetLog{}
	for _, e := range entries {
		if e.cr.rule.Quiet != nil {
			continue
		}
		checks = append(checks, e.check)
		// A rule by the dimension alone that holds nothing has Sub "":
		// its weight tells it from another such rule.
		key := e.check.Sub + "|" + e.check.Rule.Weight
		i, ok := bySub[key]
		if !ok {
			values := e.values
			if values == nil {
				values = map[string]string{}
			}
			i = len(logs)
			logs = append(logs, resetLog{Values: values})
			bySub[key] = i
		}
		logs[i].Rules = append(logs[i].Rules, e.cr.rule.Name)
	}
	for from := 0; from < len(checks); from += checksPerCall {
		part := checks[from:min(from+checksPerCall, len(checks))]
		start := time.Now()
		err := q.cs.store.Reset(ctx, &limiter.Request{Checks: part})
		newStoreOp(q.cs.name, opReset).observe(start, err)
		if err != nil {
			return nil, err
		}
	}
	source := resetSourceAdmin
	if via == "console" {
		source = resetSourceConsole
	}
	metrics.resets.WithLabelValues(q.cs.name, source).Inc()
	log := append([]zap.Field{zap.String("handler", q.cs.name), zap.String("dimension", q.dim), zap.Int("logs", len(logs))}, fields...)
	if q.cs.logValues {
		log = append(log, zap.String("value", q.value))
	}
	q.cs.logger.Info("every record of one value reset through the "+via, log...)
	return logs, nil
}
