package caddymodule

import (
	"fmt"
	"net/http"
	"net/url"
	"sort"
	"strings"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
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

// query parses the query string of an admin request; a failure is the
// answer to give.
func (cs *capSet) query(raw string) (*usageQuery, *failure) {
	params, err := url.ParseQuery(raw)
	if err != nil {
		return nil, &failure{status: http.StatusBadRequest, reason: "malformed query: " + err.Error()}
	}
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)

	q := &usageQuery{cs: cs, values: make(map[string]string, len(params))}
	zoneGiven := false
	for _, k := range keys {
		vs := params[k]
		_, isDim := cs.dimensions[k]
		switch {
		case !isDim && k != zoneParam:
			return nil, &failure{status: http.StatusBadRequest, dimension: k,
				reason: fmt.Sprintf("unknown dimension %q (%s has %s)", k, cs.name, strings.Join(cs.dimensionNames(), ", "))}
		case len(vs) != 1 && isDim:
			return nil, &failure{status: http.StatusBadRequest, dimension: k, reason: fmt.Sprintf("%s given %d times", k, len(vs))}
		case len(vs) != 1:
			return nil, &failure{status: http.StatusBadRequest, reason: fmt.Sprintf("zone given %d times", len(vs))}
		case vs[0] == "" && isDim:
			return nil, &failure{status: http.StatusBadRequest, dimension: k, reason: "missing value for dimension " + k}
		case vs[0] == "":
			return nil, &failure{status: http.StatusBadRequest, reason: "missing value for zone"}
		case isDim:
			q.values[k] = vs[0]
		default:
			z, err := loadZone(vs[0])
			if err != nil {
				return nil, &failure{status: http.StatusBadRequest, reason: "zone: " + err.Error()}
			}
			q.zone, zoneGiven = z, true
		}
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
