package support

import (
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/freqcap/caddy-freqcap/caddymodule/internal/capset"
	"github.com/freqcap/caddy-freqcap/caddymodule/internal/reply"
	"github.com/freqcap/caddy-freqcap/caddymodule/internal/zones"
	"github.com/freqcap/caddy-freqcap/limiter"
)

// This file is what an answer depends on beyond the dimensions: a rule
// may read its calendar or quiet zone, its limit or its cost from a
// placeholder of each request ({http.request.header.X-TZ}, {tier_day}
// from a map, {json.amount}). Support cannot read a request, so it asks
// for each such value, as a query parameter named after the placeholder,
// and an answer that was not given one says what it assumed instead.

// The kinds of input.
const (
	kindZone  = "zone"
	kindLimit = "limit"
	kindCost  = "cost"
)

// input is one value the cap set's answers depend on beyond its
// dimensions: a placeholder some rules read their zone, limit or cost
// from.
type input struct {
	// Param is the query parameter that gives it: the placeholder without
	// its braces (http.request.header.X-TZ, tier_day), or the whole
	// expression when it is more than one placeholder.
	Param       string `json:"param"`
	Kind        string `json:"kind"`
	Placeholder string `json:"placeholder"`
	// Words is the placeholder as support staff read it ("header X-TZ").
	Words string   `json:"words"`
	Rules []string `json:"rules"`
}

// inputsOf lists the cap set's inputs, in the order its rules first read
// them; rules that read one placeholder share its input.
func inputsOf(cs *capset.CapSet) []input {
	out := []input{}
	index := map[[2]string]int{} // by kind and placeholder
	for i := range cs.Rules {
		cr := &cs.Rules[i]
		for _, kp := range [][2]string{{kindZone, cr.ZoneExpr}, {kindLimit, cr.LimitExpr}, {kindCost, cr.CostExpr}} {
			if kp[1] == "" {
				continue
			}
			j, ok := index[kp]
			if !ok {
				j = len(out)
				index[kp] = j
				out = append(out, input{Kind: kp[0], Placeholder: kp[1], Words: placeholderWords(kp[1]), Param: paramName(cs, out, kp[1], kp[0])})
			}
			out[j].Rules = append(out[j].Rules, cr.Rule.Name)
		}
	}
	return out
}

// paramName names the parameter of a placeholder: its key, unless a
// dimension or an earlier input has that name, when its kind is added.
func paramName(cs *capset.CapSet, earlier []input, expr, kind string) string {
	name := expr
	if inner, ok := strings.CutPrefix(expr, "{"); ok && strings.HasSuffix(inner, "}") && !strings.ContainsAny(inner[:len(inner)-1], "{}") {
		name = inner[:len(inner)-1]
	}
	taken := func(n string) bool {
		if _, ok := cs.Dimensions[n]; ok {
			return true
		}
		for _, in := range earlier {
			if in.Param == n {
				return true
			}
		}
		return false
	}
	for taken(name) {
		name += "." + kind
	}
	return name
}

// placeholderWords puts a placeholder expression as people say it, each
// {...} in words and the text around it kept: {http.request.header.X-Kind}
// is "header X-Kind", {json.message.token} "JSON message.token". The
// console and the answers' notes show placeholders only through here.
func placeholderWords(expr string) string {
	var b strings.Builder
	for {
		open := strings.IndexByte(expr, '{')
		if open < 0 {
			break
		}
		end := strings.IndexByte(expr[open:], '}')
		if end < 0 {
			break
		}
		b.WriteString(expr[:open])
		b.WriteString(keyWords(expr[open+1 : open+end]))
		expr = expr[open+end+1:]
	}
	b.WriteString(expr)
	return b.String()
}

// keyWords is one placeholder's key in words.
func keyWords(key string) string {
	if rest, ok := strings.CutPrefix(key, "lower."); ok && rest != "" {
		return "lower case of " + keyWords(rest)
	}
	for _, w := range [...]struct{ prefix, words string }{
		{"http.request.header.", "header "},
		{"header.", "header "},
		{"json.", "JSON "},
		{"form.", "form field "},
		{"fcm_topics.", "FCM condition topics of JSON "},
		{"fcm_topic.", "FCM topic of JSON "},
		{"email.", "email address of JSON "},
		{"device_token.", "device token of JSON "},
		{"http.request.uri.query.", "query "},
		{"query.", "query "},
		{"http.request.cookie.", "cookie "},
		{"cookie.", "cookie "},
		{"http.vars.", "variable "},
		{"vars.", "variable "},
		{"env.", "environment variable "},
	} {
		if rest, ok := strings.CutPrefix(key, w.prefix); ok && rest != "" {
			return w.words + rest
		}
	}
	switch key {
	case "http.auth.user.id":
		return "the signed-in user"
	case "http.request.remote.host", "remote_host", "client_ip", "http.vars.client_ip":
		return "client IP"
	case "http.request.host", "host":
		return "host"
	case "http.request.uri.path", "path":
		return "path"
	case "http.request.method", "method":
		return "method"
	}
	return key
}

// given is what a query gave beyond the dimensions, by placeholder.
type given struct {
	zones  map[string]*time.Location
	limits map[string]int64
	costs  map[string]int64
	// zone is the legacy zone parameter: the zone of every zone
	// placeholder not given by its own.
	zone *time.Location
}

// give reads the value v of inputs named k into g; ok is false when k
// names no input. A value that is not one of the input's kind is the
// failure to answer.
func (g *given) give(inputs []input, k, v string) (ok bool, fail *reply.Failure) {
	for _, in := range inputs {
		if in.Param != k {
			continue
		}
		ok = true
		switch in.Kind {
		case kindZone:
			z, err := zones.Load(v)
			if err != nil {
				return true, &reply.Failure{Status: http.StatusBadRequest, Reason: k + ": " + err.Error()}
			}
			g.zones[in.Placeholder] = z
		case kindLimit:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 1 {
				return true, &reply.Failure{Status: http.StatusBadRequest, Reason: fmt.Sprintf("%s: the limit %s gives is %q, not a positive integer", k, in.Placeholder, v)}
			}
			g.limits[in.Placeholder] = min(n, limiter.MaxLimit)
		case kindCost:
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 || n > limiter.MaxCost {
				return true, &reply.Failure{Status: http.StatusBadRequest, Reason: fmt.Sprintf("%s: the cost %s gives is %q, not an integer from 0 to %d", k, in.Placeholder, v, limiter.MaxCost)}
			}
			g.costs[in.Placeholder] = n
		}
	}
	return ok, nil
}

// assumption is a value an answer was not given and assumed: what the
// request would have said, had support known it.
type assumption struct {
	Kind  string `json:"kind"` // zone, limit or cost
	Param string `json:"param"`
	Value string `json:"value"`
	// Note says it in words: "counted in UTC, the fallback zone: header
	// X-TZ not given".
	Note string `json:"note"`
}

// apply gives c the zone, limit and cost the query gave for cr, and
// returns what it assumed for those not given.
func (g *given) apply(inputs []input, cr *capset.Rule, c *limiter.Check) []assumption {
	var out []assumption
	param := func(kind, expr string) string {
		for _, in := range inputs {
			if in.Kind == kind && in.Placeholder == expr {
				return in.Param
			}
		}
		return expr
	}
	if e := cr.ZoneExpr; e != "" {
		switch z, ok := g.zones[e]; {
		case ok:
			c.Zone = z
		case g.zone != nil:
			c.Zone = g.zone
		default:
			fb := cr.FallbackZone().String()
			out = append(out, assumption{Kind: kindZone, Param: param(kindZone, e), Value: fb,
				Note: "counted in " + fb + ", the fallback zone: " + placeholderWords(e) + " not given"})
		}
	}
	if e := cr.LimitExpr; e != "" {
		if n, ok := g.limits[e]; ok {
			c.Limit = n
		} else if cr.LimitFallback > 0 {
			out = append(out, assumption{Kind: kindLimit, Param: param(kindLimit, e), Value: strconv.FormatInt(cr.LimitFallback, 10),
				Note: fmt.Sprintf("limit %d, the fallback: %s not given", cr.LimitFallback, placeholderWords(e))})
		} else {
			out = append(out, assumption{Kind: kindLimit, Param: param(kindLimit, e), Value: strconv.FormatInt(cr.Rule.Limit, 10),
				Note: fmt.Sprintf("limit %d, the most a request may set: %s not given, and the rule has no fallback", cr.Rule.Limit, placeholderWords(e))})
		}
	}
	if e := cr.CostExpr; e != "" {
		if n, ok := g.costs[e]; ok {
			c.Cost = n
		} else {
			out = append(out, assumption{Kind: kindCost, Param: param(kindCost, e), Value: "",
				Note: "whether a send fits depends on its cost, " + placeholderWords(e) + ": not given"})
		}
	}
	return out
}
