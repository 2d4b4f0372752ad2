package support

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/freqcap/caddy-freqcap/caddymodule/internal/capset"
	"github.com/freqcap/caddy-freqcap/caddymodule/internal/reply"
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
	// Unmatched are the logs held under the value that no rule of the cap
	// set reads: a rule since removed or changed (its dimensions, its
	// cost), or one of another cap set with the same key_prefix. DELETE
	// forgets them too. A console limited by cap_sets leaves them out.
	Unmatched []heldEntry `json:"unmatched"`
}

// heldEntry is a log no rule reads, by what its id says.
type heldEntry struct {
	Values  map[string]string `json:"values"`
	Hashed  []string          `json:"hashed,omitempty"`
	Weight  string            `json:"weight,omitempty"`
	Records int               `json:"records"`
	// Sub is the stored id of a log whose id could not be read.
	Sub string `json:"sub,omitempty"`
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

// resetLog is one log a DELETE of records forgot, with the rules that
// read it (none for an unmatched log).
type resetLog struct {
	Rules  []string          `json:"rules"`
	Values map[string]string `json:"values"`
	Hashed []string          `json:"hashed,omitempty"`
}

// serveRecords answers GET and DELETE of .../records for the cap set
// named name, as serveUsage does for .../usage. With ownOnly (a console
// limited to some cap sets) the logs no rule of the cap set reads are
// neither listed nor forgotten: they may be another cap set's, on the same
// key_prefix, which that console must not read or lift.
func serveRecords(w http.ResponseWriter, r *http.Request, name, via string, ownOnly bool, fields ...zap.Field) error {
	cs, err := supportTarget(w, r, name)
	if cs == nil {
		return err
	}
	q, fail := readRecordsQuery(cs, r.URL.RawQuery)
	if fail != nil {
		return fail.Write(w)
	}
	lister, ok := cs.Store.(limiter.Lister)
	if !ok {
		return (&reply.Failure{Status: http.StatusNotImplemented, Reason: "this store cannot list what it holds"}).Write(w)
	}
	ctx, cancel := context.WithTimeout(r.Context(), max(cs.Timeout, usageTimeout))
	defer cancel()
	held, err := lister.Held(ctx, q.dim, q.value, time.Time{})
	if err != nil {
		return storeUnavailable(w, err)
	}
	entries, unmatched := q.entries(held)
	if ownOnly {
		unmatched = nil
	}
	if r.Method == http.MethodDelete {
		logs, err := q.reset(ctx, entries, unmatched, via, fields)
		if err != nil {
			return resetUnavailable(w, err)
		}
		return reply.JSON(w, http.StatusOK, "application/json", recordsReset{Name: cs.Name, Dimension: q.dim, Value: q.value, Reset: logs, Elsewhere: q.elsewhere()})
	}
	now, rules, err := usageOf(cs, ctx, entries)
	if err != nil {
		return storeUnavailable(w, err)
	}
	out := recordsAnswer{Name: cs.Name, Now: rfc3339ms(now), Dimension: q.dim, Value: q.value, Rules: rules,
		Elsewhere: q.elsewhere(), Unmatched: make([]heldEntry, len(unmatched))}
	for i, h := range unmatched {
		out.Unmatched[i] = heldEntry{Values: h.Values, Hashed: h.Hashed, Weight: h.Weight, Records: h.Records}
		if h.Unreadable {
			out.Unmatched[i].Sub = h.Sub
		}
	}
	return reply.JSON(w, http.StatusOK, "application/json", out)
}

// recordsQuery is a records query resolved against a cap set.
type recordsQuery struct {
	cs         *capset.CapSet
	dim, value string
	inputs     []input
	given      given
}

// recordsQuery parses the query of a records request: one dimension that
// keys some rule's records, and optionally a zone.
func readRecordsQuery(cs *capset.CapSet, raw string) (*recordsQuery, *reply.Failure) {
	p, zoneGiven, fail := params(cs, raw)
	if fail != nil {
		return nil, fail
	}
	if len(p.hashed) > 0 {
		// The store lists what it holds under a value's key, which a
		// long value's hash does not give back.
		return nil, &reply.Failure{Status: http.StatusBadRequest, Reason: "records reads its one value as sent: hashed is for usage"}
	}
	// The constant dimension of a rule without by is always among the
	// values, and never the one asked for: its log is everyone's.
	asked := map[string]string{}
	for dim, value := range p.values {
		if !constantDim(cs, dim) {
			asked[dim] = value
		}
	}
	if len(asked) != 1 {
		return nil, &reply.Failure{Status: http.StatusBadRequest, Reason: fmt.Sprintf("give one dimension, whose records to list (%s keys records by %s)", cs.Name, strings.Join(keyingDimensions(cs), ", "))}
	}
	q := &recordsQuery{cs: cs, inputs: p.inputs, given: p.given}
	for dim, value := range asked { // the one
		q.dim, q.value = dim, value
	}
	zoned := false
	for i := range cs.Rules {
		cr := &cs.Rules[i]
		if len(cr.Rule.By) > 0 && cr.Rule.By[0] == q.dim {
			zoned = zoned || cr.ZoneExpr != ""
		}
	}
	if !slices.Contains(keyingDimensions(cs), q.dim) {
		return nil, &reply.Failure{Status: http.StatusBadRequest, Dimension: q.dim,
			Reason: fmt.Sprintf("no rule keys its records by %s (%s keys records by %s; use usage with every dimension of a rule)", q.dim, cs.Name, strings.Join(keyingDimensions(cs), ", "))}
	}
	if zoneGiven && !zoned {
		return nil, &reply.Failure{Status: http.StatusBadRequest, Reason: "zone: none of the rules keyed by " + q.dim + " has a per-request zone"}
	}
	return q, nil
}

// constantDim reports whether dim is the constant dimension of a rule
// without by.
func constantDim(cs *capset.CapSet, dim string) bool {
	for _, d := range cs.Dims {
		if d.Name == dim {
			return d.Constant
		}
	}
	return false
}

// keyingDimensions are the first dimensions of the cap set's counting
// rules, sorted: the values a records query can list (never the constant
// one of a rule without by).
func keyingDimensions(cs *capset.CapSet) []string {
	var out []string
	for _, cr := range cs.Rules {
		if cr.Rule.Quiet == nil && len(cr.Rule.By) > 0 && !constantDim(cs, cr.Rule.By[0]) && !slices.Contains(out, cr.Rule.By[0]) {
			out = append(out, cr.Rule.By[0])
		}
	}
	sort.Strings(out)
	return out
}

// entries are the rules to answer for, in the cap set's order: a quiet
// rule over the dimension alone (or over nobody); a rule by the dimension
// alone, held or not (its usage is then 0); and a rule by more dimensions
// once for each log held for it. unmatched are the logs held that no rule
// reads.
func (q *recordsQuery) entries(held []limiter.HeldLog) (entries []usageEntry, unmatched []limiter.HeldLog) {
	read := make([]bool, len(held))
	for i := range q.cs.Rules {
		cr := &q.cs.Rules[i]
		by := cr.Rule.By
		weight := limiter.StoredForm(cr.Rule.Weight) // as a log's id keeps it
		switch {
		case cr.Rule.Quiet != nil:
			if len(by) == 0 || (len(by) == 1 && by[0] == q.dim) {
				entries = append(entries, q.entry(cr, nil))
			}
		case by[0] != q.dim:
		case len(by) == 1:
			e := q.entry(cr, nil)
			for j, h := range held {
				if !h.Unreadable && len(h.Values) == 0 && h.Weight == weight {
					e.check.Sub, e.held, e.log, e.records, read[j] = h.Sub, true, j+1, h.Records, true
				}
			}
			entries = append(entries, e)
		default:
			others := slices.Sorted(slices.Values(by[1:]))
			for j, h := range held {
				if !h.Unreadable && h.Weight == weight && slices.Equal(h.Dimensions(), others) {
					e := q.entry(cr, &h)
					e.log = j + 1
					entries = append(entries, e)
					read[j] = true
				}
			}
		}
	}
	for j, h := range held {
		if !read[j] {
			unmatched = append(unmatched, h)
		}
	}
	return entries, unmatched
}

// entry reads cr's log h (nil: the one of the dimension's value alone).
func (q *recordsQuery) entry(cr *capset.Rule, h *limiter.HeldLog) usageEntry {
	// The rule's own cost, as usage gives it (see usageQuery.check): a
	// rule past its limit by exempt sends is then refused, with the wait
	// the next send would get.
	c := limiter.Check{Rule: cr.Rule, Values: make([]string, len(cr.Rule.By)), Limit: cr.LimitFallback, Cost: cr.Cost}
	for j, d := range cr.Rule.By {
		if j == 0 {
			c.Values[0] = q.value
		} else if h != nil {
			c.Values[j] = h.Values[d]
		}
	}
	e := usageEntry{cr: cr}
	if h != nil {
		c.Sub = h.Sub
		e.values, e.hashed, e.held, e.records = h.Values, h.Hashed, true, h.Records
	}
	e.assumed = q.given.apply(q.inputs, cr, &c)
	e.check = c
	return e
}

// elsewhere lists the rules over the dimension that another of their
// dimensions keys.
func (q *recordsQuery) elsewhere() []elsewhere {
	out := []elsewhere{}
	for _, cr := range q.cs.Rules {
		if cr.Rule.Quiet == nil && len(cr.Rule.By) > 1 && cr.Rule.By[0] != q.dim && slices.Contains(cr.Rule.By, q.dim) {
			out = append(out, elsewhere{Rule: cr.Rule.Name, By: cr.Rule.By, KeyedBy: cr.Rule.By[0]})
		}
	}
	return out
}

// reset forgets every log held under the value: those the entries read
// and the unmatched ones. It logs it once at info naming via and fields
// (also when the store failed part-way, saying so), counts one reset, and
// returns the logs forgotten.
func (q *recordsQuery) reset(ctx context.Context, entries []usageEntry, unmatched []limiter.HeldLog, via string, fields []zap.Field) ([]resetLog, error) {
	var checks []limiter.Check
	bySub := map[string]int{} // index into logs
	logs := []resetLog{}
	for _, e := range entries {
		if !e.held {
			continue // nothing to forget
		}
		checks = append(checks, e.check)
		i, ok := bySub[e.check.Sub]
		if !ok {
			values := e.values
			if values == nil {
				values = map[string]string{}
			}
			i = len(logs)
			logs = append(logs, resetLog{Values: values, Hashed: e.hashed})
			bySub[e.check.Sub] = i
		}
		logs[i].Rules = append(logs[i].Rules, e.cr.Rule.Name)
	}
	// A log no rule reads is named by its id alone, under a rule made up
	// for it: a reset forgets a log whatever its window.
	anyRule := &limiter.Rule{Name: "unmatched", By: []string{q.dim}, Limit: 1, Window: limiter.Window{Duration: time.Minute}}
	for _, h := range unmatched {
		checks = append(checks, limiter.Check{Rule: anyRule, Values: []string{q.value}, Sub: h.Sub})
		logs = append(logs, resetLog{Rules: []string{}, Values: h.Values, Hashed: h.Hashed})
	}
	var err error
	done := 0
	for done < len(checks) && err == nil {
		part := checks[done:min(done+checksPerCall, len(checks))]
		start := time.Now()
		err = q.cs.Store.Reset(ctx, &limiter.Request{Checks: part})
		q.cs.ObserveReset(start, err)
		if err == nil {
			done += len(part)
		}
	}
	if done == 0 && err != nil {
		return nil, err
	}
	source := resetSourceAdmin
	if via == "console" {
		source = resetSourceConsole
	}
	q.cs.CountReset(source)
	log := append([]zap.Field{zap.String("handler", q.cs.Name), zap.String("dimension", q.dim), zap.Int("logs", len(logs))}, fields...)
	if q.cs.LogValues {
		log = append(log, zap.String("value", q.value))
	}
	if err != nil {
		q.cs.Logger.Warn("records of one value reset in part through the "+via+": the store failed", append(log, zap.Int("checks_done", done), zap.Int("checks", len(checks)), zap.Error(err))...)
		return nil, err
	}
	q.cs.Logger.Info("every record of one value reset through the "+via, log...)
	return logs, nil
}
