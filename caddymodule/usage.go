package caddymodule

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// usageTimeout bounds a store call of the admin API or the console. It is
// not on any send's path, so it may wait longer than the handler's timeout.
const usageTimeout = 5 * time.Second

// serveUsage answers the usage of the cap set named name for the dimension
// values in r's query: GET reports it, DELETE forgets it. The admin API
// and the console both answer through here, with the bodies and errors
// documented on AdminAPI; via names the caller in the reset log, and
// fields add to it (such as who asked).
func serveUsage(w http.ResponseWriter, r *http.Request, name, via string, fields ...zap.Field) error {
	cs, err := supportTarget(w, r, name)
	if cs == nil {
		return err
	}
	q, fail := cs.query(r.URL.RawQuery)
	if fail != nil {
		return fail.write(w)
	}
	ctx, cancel := context.WithTimeout(r.Context(), max(cs.timeout, usageTimeout))
	defer cancel()
	if r.Method == http.MethodDelete {
		rules, err := q.reset(ctx, via, fields)
		if err != nil {
			return storeUnavailable(w, err)
		}
		return writeJSON(w, http.StatusOK, "application/json", resetAnswer{Name: cs.name, Reset: rules})
	}
	out, err := q.usage(ctx)
	if err != nil {
		return storeUnavailable(w, err)
	}
	return writeJSON(w, http.StatusOK, "application/json", out)
}

// supportTarget checks a support request's method (GET or DELETE) and
// finds its cap set; with none, the answer has been written and err is
// the writing's.
func supportTarget(w http.ResponseWriter, r *http.Request, name string) (cs *capSet, err error) {
	if r.Method != http.MethodGet && r.Method != http.MethodDelete {
		w.Header().Set("Allow", "GET, DELETE")
		return nil, (&failure{status: http.StatusMethodNotAllowed, reason: "method " + r.Method + " not allowed: use GET or DELETE"}).write(w)
	}
	if cs = lookupCapSet(name); cs == nil {
		return nil, unknownCapSet(w, name)
	}
	return cs, nil
}

// usageAnswer is the body of a GET.
type usageAnswer struct {
	Name string `json:"name"`
	// Now is when the store answered (RFC 3339, UTC, milliseconds): the
	// end of every rule's timeline.
	Now   string      `json:"now"`
	Rules []ruleUsage `json:"rules"`
}

// sendMark is one recorded send (or, in a bucketed log, one bucket of
// sends) on a rule's timeline.
type sendMark struct {
	At    string `json:"at"` // RFC 3339, UTC, milliseconds
	Units int64  `json:"units"`
}

// ruleUsage is one rule's part of a usageAnswer. The console shows every
// field it does not know under the rule, so a field added here reaches
// support staff without a change to the page.
type ruleUsage struct {
	Rule string   `json:"rule"`
	By   []string `json:"by"`
	// Values are the values of the rule's dimensions after the first, in
	// a listing of everything held under one value (records), where one
	// rule appears once a log: a value longer than 64 bytes is shown as
	// the store keeps it, "#" and the hex of its hash.
	Values map[string]string `json:"values,omitempty"`
	// Hashed names the dimensions of Values whose value is such a hash.
	Hashed     []string `json:"hashed,omitempty"`
	Limit      int64    `json:"limit"`
	Window     string   `json:"window"`
	Used       int64    `json:"used"`
	Remaining  int64    `json:"remaining"`
	ResetAfter int64    `json:"reset_after"`
	// Quiet and QuietUntil are a quiet rule's only: whether its range
	// holds now, and the seconds until that range ends (0 when not quiet).
	Quiet      *bool  `json:"quiet,omitempty"`
	QuietUntil *int64 `json:"quiet_until,omitempty"`
	// DryRun marks a shadow rule (dry_run in its block): counted and
	// shown, but it never refuses a send.
	DryRun bool `json:"dry_run,omitempty"`
	// From is where the rule's window begins (RFC 3339), Sends what it
	// counts from there, oldest first, and Precision how exact their
	// times are (the record log's: every send to the millisecond, or one
	// mark a bucket). Counting rules only.
	From      string     `json:"from,omitempty"`
	Sends     []sendMark `json:"sends,omitempty"`
	Precision string     `json:"precision,omitempty"`
}

// rfc3339ms writes t as the usage answer does.
func rfc3339ms(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// precisionOf says how exact a log's times are.
func precisionOf(grain time.Duration) string {
	if grain == 0 {
		return "exact: one mark a send, to the millisecond"
	}
	return "merged: one mark a bucket of " + grain.String() + ", at its latest send, with its units"
}

// resetAnswer is the body of a DELETE.
type resetAnswer struct {
	Name  string   `json:"name"`
	Reset []string `json:"reset"`
}

func unknownCapSet(w http.ResponseWriter, name string) error {
	return writeJSON(w, http.StatusNotFound, "application/json", struct {
		Error string `json:"error"`
		Name  string `json:"name"`
	}{"no frequency_cap handler named " + name, name})
}

// storeUnavailable answers a store failure with the store's own error,
// which says what failed ("frequency cap store failed: dial tcp ...",
// "frequency cap store timed out: ...").
func storeUnavailable(w http.ResponseWriter, err error) error {
	return (&failure{status: http.StatusServiceUnavailable, reason: err.Error()}).write(w)
}

// usage reads the selected rules' usage from the store, recording nothing.
func (q *usageQuery) usage(ctx context.Context) (*usageAnswer, error) {
	entries := make([]usageEntry, len(q.rules))
	for i, cr := range q.rules {
		entries[i] = usageEntry{cr: cr, check: q.check(cr)}
	}
	now, rules, err := q.cs.usageOf(ctx, entries)
	if err != nil {
		return nil, err
	}
	return &usageAnswer{Name: q.cs.name, Now: rfc3339ms(now), Rules: rules}, nil
}

// usageEntry is one rule to answer for, with the check that reads it.
type usageEntry struct {
	cr    *compiledRule
	check limiter.Check
	// values, when set, are the log's other values, shown with the rule
	// (a listing of everything held under one value), and hashed those
	// kept as a hash.
	values map[string]string
	hashed []string
	// held: the store holds the log (a records listing), so a reset of
	// everything held forgets it.
	held bool
}

// checksPerCall bounds the checks of one store call of a listing: a
// request reads at most 255 logs (limiter's maxSections).
const checksPerCall = 200

// usageOf answers for each entry, in order, at one instant: the store's
// clock at the first call. A counting rule's usage and sends come from the
// store, recording nothing; a quiet rule records nothing, so it is
// answered from the clock alone: whether its range holds now, and the
// seconds until it ends.
func (cs *capSet) usageOf(ctx context.Context, entries []usageEntry) (time.Time, []ruleUsage, error) {
	var counting []int // indices into entries
	for i := range entries {
		if entries[i].cr.rule.Quiet == nil {
			counting = append(counting, i)
		}
	}
	results := make([]limiter.Result, len(entries))
	sends := make([]*limiter.Sends, len(entries))
	var now time.Time
	for from := 0; from < len(counting); from += checksPerCall {
		part := counting[from:min(from+checksPerCall, len(counting))]
		req := &limiter.Request{Checks: make([]limiter.Check, len(part)), Now: now}
		for j, i := range part {
			req.Checks[j] = entries[i].check
		}
		start := time.Now()
		d, err := cs.store.Usage(ctx, req)
		newStoreOp(cs.name, opUsage).observe(start, err)
		if err != nil {
			return time.Time{}, nil, err
		}
		if now.IsZero() {
			now = d.Now
		}
		for j, i := range part {
			results[i] = d.Results[j]
		}
		if hist, ok := cs.store.(limiter.Historian); ok {
			// The same instant as the usage, so that the marks are what
			// it counted.
			req.Now = d.Now
			h, err := hist.History(ctx, req)
			if err != nil {
				return time.Time{}, nil, err
			}
			for j, i := range part {
				sends[i] = &h[j]
			}
		}
	}
	if now.IsZero() {
		now = time.Now()
	}
	out := make([]ruleUsage, 0, len(entries))
	for i := range entries {
		e := &entries[i]
		if qr := e.cr.rule.Quiet; qr != nil {
			until, quiet := qr.Until(now, e.check.Zone)
			secs := ceilSeconds(until)
			out = append(out, ruleUsage{
				Rule:       e.cr.rule.Name,
				By:         nonNil(e.cr.rule.By),
				Window:     windowOf(&e.check),
				ResetAfter: secs,
				Quiet:      &quiet,
				QuietUntil: &secs,
				DryRun:     e.cr.shadow,
			})
			continue
		}
		res := results[i]
		ru := ruleUsage{
			Rule:       res.Rule.Name,
			By:         res.Rule.By,
			Values:     e.values,
			Hashed:     e.hashed,
			Limit:      res.Limit,
			Window:     windowOf(&e.check),
			Used:       res.Used,
			Remaining:  res.Remaining,
			ResetAfter: ceilSeconds(res.Reset),
			DryRun:     e.cr.shadow,
		}
		if h := sends[i]; h != nil {
			ru.From, ru.Precision = rfc3339ms(h.From), precisionOf(h.Grain)
			ru.Sends = make([]sendMark, len(h.Times))
			for j, at := range h.Times {
				ru.Sends[j] = sendMark{At: rfc3339ms(at), Units: h.Units[j]}
			}
		}
		out = append(out, ru)
	}
	return now, out, nil
}

// reset forgets the selected rules' records (and those of any rule that
// shares their record log), logs it at info naming via and fields, and
// returns the names of the rules reset (quiet rules record nothing).
func (q *usageQuery) reset(ctx context.Context, via string, fields []zap.Field) ([]string, error) {
	req := q.request()
	if len(req.Checks) > 0 { // quiet rules alone record nothing to forget
		start := time.Now()
		err := q.cs.store.Reset(ctx, req)
		newStoreOp(q.cs.name, opReset).observe(start, err)
		if err != nil {
			return nil, err
		}
	}
	rules := make([]string, len(req.Checks))
	for i, c := range req.Checks {
		rules[i] = c.Rule.Name
	}
	source := resetSourceAdmin
	if via == "console" {
		source = resetSourceConsole
	}
	metrics.resets.WithLabelValues(q.cs.name, source).Inc()
	log := append([]zap.Field{zap.String("handler", q.cs.name), zap.Strings("rules", rules)}, fields...)
	if q.cs.logValues {
		log = append(log, zap.Object("values", checkValues(req.Checks)))
	}
	q.cs.logger.Info("usage reset through the "+via, log...)
	return rules, nil
}

// The source label of caddy_frequency_cap_resets_total.
const (
	resetSourceAdmin   = "admin"
	resetSourceConsole = "console"
)

// zoneParam is the admin query parameter that names the zone of calendar
// rules whose zone is a placeholder.
const zoneParam = "zone"

// usageQuery is an admin API query resolved against a cap set: the rules
// whose dimensions it gives all of, and their values.
type usageQuery struct {
	cs     *capSet
	rules  []*compiledRule
	values map[string]string
	zone   *time.Location
}

// nonNil is by, or an empty list for a rule by no dimension (a quiet rule
// for everyone), so that JSON says [] rather than null.
func nonNil(by []string) []string {
	if by == nil {
		return []string{}
	}
	return by
}

// query parses the query string of an admin request; a failure is the
// answer to give.
func (cs *capSet) query(raw string) (*usageQuery, *failure) {
	q, zoneGiven, fail := cs.params(raw)
	if fail != nil {
		return nil, fail
	}
	zoned := false
rules:
	for i := range cs.rules {
		cr := &cs.rules[i]
		for _, di := range cr.dims {
			if _, ok := q.values[cs.dims[di].name]; !ok {
				continue rules
			}
		}
		q.rules = append(q.rules, cr)
		zoned = zoned || cr.zoneExpr != ""
	}
	if len(q.rules) == 0 {
		return nil, &failure{status: http.StatusBadRequest, reason: "no rule has all its dimensions given: " + cs.ruleDimensions()}
	}
	if zoneGiven && !zoned {
		return nil, &failure{status: http.StatusBadRequest, reason: "zone: none of the rules given has a per-request zone"}
	}
	return q, nil
}

// request is the store request of the query: every selected rule that
// counts (quiet rules do not), with cost 0, so that Usage records nothing.
// A rule whose limit is a placeholder is held to its fallback (without
// one, to the largest limit a request may set).
func (q *usageQuery) request() *limiter.Request {
	req := &limiter.Request{Checks: make([]limiter.Check, 0, len(q.rules))}
	for _, cr := range q.rules {
		if cr.rule.Quiet == nil {
			req.Checks = append(req.Checks, q.check(cr))
		}
	}
	return req
}

// check is the query's check of one selected rule.
func (q *usageQuery) check(cr *compiledRule) limiter.Check {
	c := limiter.Check{Rule: cr.rule, Values: make([]string, len(cr.dims)), Limit: cr.limitFallback}
	for j, di := range cr.dims {
		c.Values[j] = q.values[q.cs.dims[di].name]
	}
	if cr.zoneExpr != "" {
		c.Zone = q.zone
	}
	return c
}

func (cs *capSet) dimensionNames() []string {
	names := make([]string, 0, len(cs.dimensions))
	for n := range cs.dimensions {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ruleDimensions lists each rule with the dimensions it needs:
// "recipient_minute (recipient), same_content (recipient, content)".
func (cs *capSet) ruleDimensions() string {
	parts := make([]string, len(cs.rules))
	for i, cr := range cs.rules {
		parts[i] = fmt.Sprintf("%s (%s)", cr.rule.Name, strings.Join(cr.rule.By, ", "))
	}
	return strings.Join(parts, ", ")
}

// params reads the dimension values and the zone of an admin query. A '+'
// is a plus sign, not a space: it starts every phone number in E.164
// (recipient=+15550100), which support staff type as they see it; a space
// is %20. (Only HTML forms write a space as '+', and neither the console
// nor a person typing a URL does.)
func (cs *capSet) params(raw string) (q *usageQuery, zoneGiven bool, fail *failure) {
	params, err := url.ParseQuery(strings.ReplaceAll(raw, "+", "%2B"))
	if err != nil {
		return nil, false, &failure{status: http.StatusBadRequest, reason: "malformed query: " + err.Error()}
	}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)

	q = &usageQuery{cs: cs, values: make(map[string]string, len(params))}
	for _, k := range keys {
		vs := params[k]
		_, isDim := cs.dimensions[k]
		switch {
		case !isDim && k != zoneParam:
			return nil, false, &failure{status: http.StatusBadRequest, dimension: k,
				reason: fmt.Sprintf("unknown dimension %q (%s has %s)", k, cs.name, strings.Join(cs.dimensionNames(), ", "))}
		case len(vs) != 1 && isDim:
			return nil, false, &failure{status: http.StatusBadRequest, dimension: k, reason: fmt.Sprintf("%s given %d times", k, len(vs))}
		case len(vs) != 1:
			return nil, false, &failure{status: http.StatusBadRequest, reason: fmt.Sprintf("zone given %d times", len(vs))}
		case vs[0] == "" && isDim:
			return nil, false, &failure{status: http.StatusBadRequest, dimension: k, reason: "missing value for dimension " + k}
		case vs[0] == "":
			return nil, false, &failure{status: http.StatusBadRequest, reason: "missing value for zone"}
		case isDim:
			q.values[k] = vs[0]
		default:
			z, err := loadZone(vs[0])
			if err != nil {
				return nil, false, &failure{status: http.StatusBadRequest, reason: "zone: " + err.Error()}
			}
			q.zone, zoneGiven = z, true
		}
	}
	return q, zoneGiven, nil
}
