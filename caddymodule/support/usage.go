package support

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"go.uber.org/zap"

	"github.com/freqcap/caddy-freqcap/caddymodule/internal/capset"
	"github.com/freqcap/caddy-freqcap/caddymodule/internal/reply"
	"github.com/freqcap/caddy-freqcap/caddymodule/internal/zones"
	"github.com/freqcap/caddy-freqcap/internal/jsonbatch"
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
	q, fail := query(cs, r.URL.RawQuery)
	if fail != nil {
		return fail.Write(w)
	}
	ctx, cancel := context.WithTimeout(r.Context(), max(cs.Timeout, usageTimeout))
	defer cancel()
	if r.Method == http.MethodDelete {
		kept := q.keepShared()
		rules, err := q.reset(ctx, via, fields)
		if err != nil {
			return resetUnavailable(w, err)
		}
		return reply.JSON(w, http.StatusOK, "application/json", resetAnswer{Name: cs.Name, Reset: rules, Kept: kept, Untouched: q.untouched()})
	}
	out, err := q.usage(ctx)
	if err != nil {
		return storeUnavailable(w, err)
	}
	return reply.JSON(w, http.StatusOK, "application/json", out)
}

// supportTarget checks a support request's method (GET or DELETE) and
// finds its cap set; with none, the answer has been written and err is
// the writing's.
func supportTarget(w http.ResponseWriter, r *http.Request, name string) (cs *capset.CapSet, err error) {
	if r.Method != http.MethodGet && r.Method != http.MethodDelete {
		w.Header().Set("Allow", "GET, DELETE")
		return nil, (&reply.Failure{Status: http.StatusMethodNotAllowed, Reason: "method " + r.Method + " not allowed: use GET or DELETE"}).Write(w)
	}
	cs, err = capset.Lookup(name)
	switch {
	case err != nil:
		// Several cap sets answer to the name: answering for one would
		// tell of sends the other decided.
		return nil, (&reply.Failure{Status: http.StatusConflict, Reason: fmt.Sprintf("cap set %q: %v; name each cap set (frequency_cap's name) to ask about it", name, err)}).Write(w)
	case cs == nil:
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
	// Exempt is how many of Units exempt sends made (admitted past the
	// rules by exempt, and counted as any): all of them for an exempt
	// send, some in a bucket. Omitted when none.
	Exempt int64 `json:"exempt,omitempty"`
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
	// Exempt is how much of Used exempt sends made (the sum of the
	// sends' exempt): used may pass the limit by as much. Counting rules
	// only.
	Exempt *int64 `json:"exempt,omitempty"`
	// Log numbers, from 1, the logs a records listing found held (rules
	// that read one log share its number), and Records is how many
	// records (sends, or buckets of them) it holds: a reset forgets them.
	// Both are omitted for a log not held, and outside a listing.
	Log     int `json:"log,omitempty"`
	Records int `json:"records,omitempty"`
	// Assumed are the values the answer depends on that the query did
	// not give (a zone, a limit, a cost placeholder), with what was
	// assumed instead.
	Assumed []assumption `json:"assumed,omitempty"`
	// Cost, Admits and RetryAfter answer, when the query gave the rule's
	// cost, whether a send of that cost would be admitted now, and if not,
	// in how many seconds. A rule without a cost that would refuse a send
	// now has RetryAfter alone: when it admits one again, which is later
	// than ResetAfter when exempt sends took it past its limit (one unit
	// freed is then not enough).
	Cost       *int64 `json:"cost,omitempty"`
	Admits     *bool  `json:"admits,omitempty"`
	RetryAfter *int64 `json:"retry_after,omitempty"`
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
	// Kept names the rules whose logs other recipients share, that a
	// reset of one recipient left alone (see keepShared); omitted when
	// none.
	Kept []string `json:"kept,omitempty"`
	// Untouched names the rules by a value the query gave that it did not
	// reset, since it gave not every dimension they count by (a content
	// rule for a reset by recipient), with those missing: a send they
	// refuse is still refused. records resets them all. Omitted when none.
	Untouched []untouchedRule `json:"untouched,omitempty"`
}

// untouchedRule is a rule a reset left alone for want of values.
type untouchedRule struct {
	Rule  string   `json:"rule"`
	Needs []string `json:"needs"`
}

// untouched lists the counting rules that share a given value with the
// query but need a dimension it did not give.
func (q *usageQuery) untouched() []untouchedRule {
	var out []untouchedRule
	for i := range q.cs.Rules {
		cr := &q.cs.Rules[i]
		if cr.Rule.Quiet != nil || slices.Contains(q.rules, cr) {
			continue
		}
		var needs []string
		shares := false
		for _, di := range cr.Dims {
			d := q.cs.Dims[di]
			if _, given := q.values[d.Name]; given && !d.Constant {
				shares = true
			} else if !given {
				needs = append(needs, d.Name)
			}
		}
		if shares && len(needs) > 0 {
			out = append(out, untouchedRule{Rule: cr.Rule.Name, Needs: needs})
		}
	}
	return out
}

func unknownCapSet(w http.ResponseWriter, name string) error {
	return reply.JSON(w, http.StatusNotFound, "application/json", struct {
		Error string `json:"error"`
		Name  string `json:"name"`
	}{"no frequency_cap handler named " + name, name})
}

// storeUnavailable answers a store failure with the store's own error,
// which says what failed ("frequency cap store failed: dial tcp ...",
// "frequency cap store timed out: ...").
func storeUnavailable(w http.ResponseWriter, err error) error {
	return (&reply.Failure{Status: http.StatusServiceUnavailable, Reason: err.Error()}).Write(w)
}

// resetUnavailable answers a reset the store failed. A reset that timed
// out may still have been made (the store may have run it after the
// gateway stopped waiting), so the answer does not say it was not.
func resetUnavailable(w http.ResponseWriter, err error) error {
	reason := err.Error()
	if errors.Is(err, limiter.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
		reason += "; the reset may still have been made: read the usage again to see"
	}
	return (&reply.Failure{Status: http.StatusServiceUnavailable, Reason: reason}).Write(w)
}

// usage reads the selected rules' usage from the store, recording nothing.
func (q *usageQuery) usage(ctx context.Context) (*usageAnswer, error) {
	entries := make([]usageEntry, len(q.rules))
	for i, cr := range q.rules {
		c, assumed := q.check(cr)
		entries[i] = usageEntry{cr: cr, check: c, assumed: assumed}
	}
	now, rules, err := usageOf(q.cs, ctx, entries)
	if err != nil {
		return nil, err
	}
	return &usageAnswer{Name: q.cs.Name, Now: rfc3339ms(now), Rules: rules}, nil
}

// usageEntry is one rule to answer for, with the check that reads it.
type usageEntry struct {
	cr    *capset.Rule
	check limiter.Check
	// values, when set, are the log's other values, shown with the rule
	// (a listing of everything held under one value), and hashed those
	// kept as a hash.
	values map[string]string
	hashed []string
	// held: the store holds the log (a records listing), so a reset of
	// everything held forgets it; records is how many records it holds.
	held         bool
	log, records int
	// assumed are the values the check was not given.
	assumed []assumption
}

// checksPerCall bounds the checks of one store call of a listing: a
// request reads at most 255 logs (limiter's maxSections).
const checksPerCall = 200

// usageOf answers for each entry, in order, at one instant: the store's
// clock at the first call. A counting rule's usage and sends come from the
// store, recording nothing; a quiet rule records nothing, so it is
// answered from the clock alone: whether its range holds now, and the
// seconds until it ends.
func usageOf(cs *capset.CapSet, ctx context.Context, entries []usageEntry) (time.Time, []ruleUsage, error) {
	var counting []int // indices into entries
	for i := range entries {
		if entries[i].cr.Rule.Quiet == nil {
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
		d, err := cs.Store.Usage(ctx, req)
		cs.ObserveUsage(start, err)
		if err == nil && d.Fallback != nil {
			// on_error local answered from this gateway's own store,
			// which holds only what it admitted while the shared one
			// failed: no answer about a recipient rather than a false
			// "nothing held".
			err = fmt.Errorf("the store failed (%v); this gateway's local fallback holds only what it admitted since, so it cannot say what the store holds", d.Fallback)
		}
		if err != nil {
			return time.Time{}, nil, err
		}
		if now.IsZero() {
			now = d.Now
		}
		for j, i := range part {
			results[i] = d.Results[j]
		}
		if hist, ok := cs.Store.(limiter.Historian); ok {
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
		if qr := e.cr.Rule.Quiet; qr != nil {
			until, quiet := qr.Until(now, e.check.Zone)
			secs := reply.CeilSeconds(until)
			out = append(out, ruleUsage{
				Rule:       e.cr.Rule.Name,
				By:         nonNil(e.cr.Rule.By),
				Window:     reply.Window(&e.check),
				ResetAfter: secs,
				Quiet:      &quiet,
				QuietUntil: &secs,
				DryRun:     e.cr.Shadow,
				Assumed:    e.assumed,
			})
			continue
		}
		res := results[i]
		ru := ruleUsage{
			Rule:       res.Rule.Name,
			By:         askedBy(cs, e.cr),
			Values:     e.values,
			Hashed:     e.hashed,
			Limit:      res.Limit,
			Window:     reply.Window(&e.check),
			Used:       res.Used,
			Remaining:  res.Remaining,
			ResetAfter: reply.CeilSeconds(res.Reset),
			DryRun:     e.cr.Shadow,
			Log:        e.log,
			Records:    e.records,
			Assumed:    e.assumed,
		}
		if e.cr.CostExpr != "" && !slices.ContainsFunc(e.assumed, func(a assumption) bool { return a.Kind == kindCost }) {
			cost, admits, retry := e.check.Cost, !res.Denied, reply.CeilSeconds(res.RetryAfter)
			ru.Cost, ru.Admits = &cost, &admits
			if cost <= res.Limit {
				// A send costing more than the limit is refused for
				// good (the gateway's detail: no wait admits it), so
				// it has no wait to give.
				ru.RetryAfter = &retry
			}
		} else if e.cr.CostExpr == "" && res.Denied && !e.cr.Shadow {
			retry := reply.CeilSeconds(res.RetryAfter)
			ru.RetryAfter = &retry
		}
		if h := sends[i]; h != nil {
			ru.From, ru.Precision = rfc3339ms(h.From), precisionOf(h.Grain)
			ru.Sends = make([]sendMark, len(h.Times))
			var exempt int64
			for j, at := range h.Times {
				ru.Sends[j] = sendMark{At: rfc3339ms(at), Units: h.Units[j], Exempt: h.Exempt[j]}
				exempt += h.Exempt[j]
			}
			ru.Exempt = &exempt
		}
		out = append(out, ru)
	}
	return now, out, nil
}

// keepShared takes out of a reset the rules whose logs other recipients
// share, and returns their names: a support reset of one recipient must
// give no one else quota back. Those are the rules without by (one count
// over every send), whenever the reset names a value, and the rules that
// do not count by the recipient (a campaign's budget, by campaign alone)
// when it names the recipient's: "ivy in the spring campaign" resets her
// counts, hers within the campaign included, and keeps the campaign's.
// The recipient is the cap set's first dimension (the first rule's
// first), as it is the batch dimension. A reset that names no value
// (DELETE usage with no parameters) resets the rules without by, and one
// that names the campaign alone the campaign's budget.
func (q *usageQuery) keepShared() []string {
	namesAValue, recipient, first := false, -1, true
	for i, d := range q.cs.Dims {
		if d.Constant {
			continue
		}
		if _, given := q.values[d.Name]; given {
			namesAValue = true
			if first {
				recipient = i // the reset names the recipient
			}
		}
		first = false
	}
	if !namesAValue {
		return nil
	}
	var kept []string
	rules := q.rules[:0:0]
	for _, cr := range q.rules {
		global := len(cr.Dims) > 0
		for _, di := range cr.Dims {
			global = global && q.cs.Dims[di].Constant
		}
		shared := global || (recipient >= 0 && !slices.Contains(cr.Dims, recipient))
		if shared && cr.Rule.Quiet == nil {
			kept = append(kept, cr.Rule.Name)
			continue
		}
		rules = append(rules, cr)
	}
	q.rules = rules
	return kept
}

// reset forgets the selected rules' records (and those of any rule that
// shares their record log), logs it at info naming via and fields, and
// returns the names of the rules reset (quiet rules record nothing).
func (q *usageQuery) reset(ctx context.Context, via string, fields []zap.Field) ([]string, error) {
	req := q.request()
	if len(req.Checks) > 0 { // quiet rules alone record nothing to forget
		start := time.Now()
		err := q.cs.Store.Reset(ctx, req)
		q.cs.ObserveReset(start, err)
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
	q.cs.CountReset(source)
	log := append([]zap.Field{zap.String("handler", q.cs.Name), zap.Strings("rules", rules)}, fields...)
	if q.cs.LogValues {
		log = append(log, zap.Object("values", reply.CheckValues(req.Checks)))
	}
	q.cs.Logger.Info("usage reset through the "+via, log...)
	return rules, nil
}

// The source label of caddy_frequency_cap_resets_total.
const (
	resetSourceAdmin   = "admin"
	resetSourceConsole = "console"
)

// hashedParam is the admin query parameter that names the dimensions
// (comma-separated) whose value is given as records shows a long one,
// "#" and the hex of its hash, to read that value's log; asSentParam
// names those whose value of that form is the text a sender sent. usage
// takes a value of that form only with one of them: a sender may send
// such a text too, and either guess would read another log than the one
// asked for, and say so in a 200 (or reset it).
const (
	hashedParam = "hashed"
	asSentParam = "as_sent"
)

// zoneParam is the admin query parameter that names the zone of calendar
// rules whose zone is a placeholder.
const zoneParam = "zone"

// usageQuery is an admin API query resolved against a cap set: the rules
// whose dimensions it gives all of, and their values.
type usageQuery struct {
	cs     *capset.CapSet
	rules  []*capset.Rule
	values map[string]string
	// hashed names the dimensions whose value is given as the store
	// keeps a long one (hashedParam), asSent those whose value of that
	// form is read as sent (asSentParam).
	hashed, asSent map[string]bool
	inputs         []input
	given          given
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
func query(cs *capset.CapSet, raw string) (*usageQuery, *reply.Failure) {
	q, zoneGiven, fail := params(cs, raw)
	if fail != nil {
		return nil, fail
	}
	if fail := q.ambiguous(); fail != nil {
		return nil, fail
	}
	zoned := false
rules:
	for i := range cs.Rules {
		cr := &cs.Rules[i]
		for _, di := range cr.Dims {
			if _, ok := q.values[cs.Dims[di].Name]; !ok {
				continue rules
			}
		}
		q.rules = append(q.rules, cr)
		zoned = zoned || cr.ZoneExpr != ""
	}
	if len(q.rules) == 0 {
		return nil, &reply.Failure{Status: http.StatusBadRequest, Reason: "no rule has all its dimensions given: " + ruleDimensions(cs)}
	}
	if zoneGiven && !zoned {
		return nil, &reply.Failure{Status: http.StatusBadRequest, Reason: "zone: none of the rules given has a per-request zone"}
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
		if cr.Rule.Quiet == nil {
			c, _ := q.check(cr)
			req.Checks = append(req.Checks, c)
		}
	}
	return req
}

// check is the query's check of one selected rule, and what it assumed
// of the values the query did not give.
func (q *usageQuery) check(cr *capset.Rule) (limiter.Check, []assumption) {
	// A rule's own cost, so that whether it refuses a send, and for how
	// long, is what the next send would get (a rule past its limit by
	// exempt sends waits for more than one unit to free up).
	c := limiter.Check{Rule: cr.Rule, Values: make([]string, len(cr.Dims)), Limit: cr.LimitFallback, Cost: cr.Cost}
	for j, di := range cr.Dims {
		name := q.cs.Dims[di].Name
		c.Values[j] = q.values[name]
		if j < 64 && q.hashed[name] {
			// A long value as records shows it, given back: its log.
			c.StoredForms |= 1 << j
		}
	}
	return c, q.given.apply(q.inputs, cr, &c)
}

func dimensionNames(cs *capset.CapSet) []string {
	names := make([]string, 0, len(cs.Dimensions))
	for n := range cs.Dimensions {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// ruleDimensions lists each rule with the dimensions it needs:
// "recipient_minute (recipient), same_content (recipient, content)".
func ruleDimensions(cs *capset.CapSet) string {
	parts := make([]string, len(cs.Rules))
	for i, cr := range cs.Rules {
		parts[i] = fmt.Sprintf("%s (%s)", cr.Rule.Name, strings.Join(cr.Rule.By, ", "))
	}
	return strings.Join(parts, ", ")
}

// params reads the dimension values and the inputs of an admin query. A
// '+' is a plus sign, not a space: it starts every phone number in E.164
// (recipient=+15550100), which support staff type as they see it; a space
// is %20. (Only HTML forms write a space as '+', and neither the console
// nor a person typing a URL does.) zoneGiven says that the legacy zone
// parameter was.
func params(cs *capset.CapSet, raw string) (q *usageQuery, zoneGiven bool, fail *reply.Failure) {
	params, err := url.ParseQuery(strings.ReplaceAll(raw, "+", "%2B"))
	if err != nil {
		return nil, false, &reply.Failure{Status: http.StatusBadRequest, Reason: "malformed query: " + err.Error()}
	}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)

	q = &usageQuery{cs: cs, values: make(map[string]string, len(params)), inputs: inputsOf(cs),
		given: given{zones: map[string]*time.Location{}, limits: map[string]int64{}, costs: map[string]int64{}}}
	// Read first: a hashed value is no text for a reader to read (an
	// email's, a device token's).
	q.hashed, q.asSent = dimensionList(cs, params, hashedParam), dimensionList(cs, params, asSentParam)
	for _, k := range keys {
		vs := params[k]
		_, isDim := cs.Dimensions[k]
		isInput := slices.ContainsFunc(q.inputs, func(in input) bool { return in.Param == k })
		isZone := !isDim && !isInput && k == zoneParam
		isHashed := !isDim && !isInput && (k == hashedParam || k == asSentParam)
		switch {
		case !isDim && !isInput && !isZone && !isHashed:
			return nil, false, &reply.Failure{Status: http.StatusBadRequest, Dimension: k,
				Reason: fmt.Sprintf("unknown dimension %q (%s has %s%s)", k, cs.Name, strings.Join(dimensionNames(cs), ", "), alsoTakes(q.inputs))}
		case len(vs) != 1 && isDim:
			return nil, false, &reply.Failure{Status: http.StatusBadRequest, Dimension: k, Reason: fmt.Sprintf("%s given %d times", k, len(vs))}
		case len(vs) != 1:
			return nil, false, &reply.Failure{Status: http.StatusBadRequest, Reason: fmt.Sprintf("%s given %d times", k, len(vs))}
		case vs[0] == "" && isDim:
			return nil, false, &reply.Failure{Status: http.StatusBadRequest, Dimension: k, Reason: "missing value for dimension " + k}
		case vs[0] == "":
			return nil, false, &reply.Failure{Status: http.StatusBadRequest, Reason: "missing value for " + k}
		case isDim:
			// The value the gateway counts under: a keying dimension's
			// is trimmed (" dave" and "dave\u200b" are dave).
			q.values[k] = vs[0]
			for _, d := range cs.Dims {
				if d.Name == k && d.Keying {
					q.values[k] = jsonbatch.TrimKey(vs[0])
				}
				if d.Name == k && d.Lookup != nil && q.values[k] != "" && !q.hashed[k] {
					v, err := d.Lookup(q.values[k])
					if err != nil {
						return nil, false, &reply.Failure{Status: http.StatusBadRequest, Dimension: k, Reason: k + ": " + err.Error()}
					}
					q.values[k] = v
				}
			}
			if q.values[k] == "" {
				return nil, false, &reply.Failure{Status: http.StatusBadRequest, Dimension: k, Reason: "missing value for dimension " + k}
			}
			if strings.IndexByte(q.values[k], 0) >= 0 {
				// The gateway refuses such a value (a 400), so nothing
				// is counted under it.
				return nil, false, &reply.Failure{Status: http.StatusBadRequest, Dimension: k, Reason: k + ": the value holds a NUL, which the gateway refuses in every request"}
			}
		case isInput:
			if _, fail := q.given.give(q.inputs, k, vs[0]); fail != nil {
				return nil, false, fail
			}
		case isHashed: // read before the loop
		default:
			z, err := zones.Load(vs[0])
			if err != nil {
				return nil, false, &reply.Failure{Status: http.StatusBadRequest, Reason: "zone: " + err.Error()}
			}
			q.given.zone, zoneGiven = z, true
		}
	}
	for _, named := range []struct {
		param string
		dims  map[string]bool
	}{{hashedParam, q.hashed}, {asSentParam, q.asSent}} {
		for d := range named.dims {
			if v, ok := q.values[d]; !ok || !limiter.IsStoredHash(v) {
				return nil, false, &reply.Failure{Status: http.StatusBadRequest, Dimension: d,
					Reason: fmt.Sprintf("%s names %s, whose value is not given in the form of a long value's hash (# and 32 lower-case hex digits, as records shows it)", named.param, d)}
			}
			if q.hashed[d] && q.asSent[d] {
				return nil, false, &reply.Failure{Status: http.StatusBadRequest, Dimension: d, Reason: "both hashed and as_sent name " + d}
			}
		}
	}
	for _, d := range cs.Dims {
		if d.Constant { // the dimension of a rule without by: always given
			q.values[d.Name] = d.Expr
		}
	}
	return q, zoneGiven, nil
}

// dimensionList is the set of dimensions a comma-separated parameter
// names (hashedParam, asSentParam), unless the cap set has a dimension of
// that name, whose value the parameter then is.
func dimensionList(cs *capset.CapSet, params url.Values, param string) map[string]bool {
	if _, isDim := cs.Dimensions[param]; isDim || len(params[param]) != 1 {
		return nil
	}
	out := map[string]bool{}
	for _, d := range strings.Split(params[param][0], ",") {
		out[d] = true
	}
	return out
}

// ambiguous is a 400 for a value in the form of a long value's hash that
// neither hashedParam nor asSentParam places.
func (q *usageQuery) ambiguous() *reply.Failure {
	for _, d := range q.cs.Dims {
		if v, ok := q.values[d.Name]; ok && !d.Constant && limiter.IsStoredHash(v) && !q.hashed[d.Name] && !q.asSent[d.Name] {
			return &reply.Failure{Status: http.StatusBadRequest, Dimension: d.Name,
				Reason: fmt.Sprintf("%s is in the form of a long value's hash, as records shows one: give hashed=%s to read the long value's log, or as_sent=%s to read this text as a sender sent it", d.Name, d.Name, d.Name)}
		}
	}
	return nil
}

// alsoTakes names the inputs' parameters, for a list of what a query
// may give after the dimensions.
func alsoTakes(inputs []input) string {
	if len(inputs) == 0 {
		return ""
	}
	names := make([]string, len(inputs))
	for i, in := range inputs {
		names[i] = in.Param
	}
	return "; it also takes " + strings.Join(names, ", ")
}
