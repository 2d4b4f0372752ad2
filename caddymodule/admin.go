package caddymodule

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"

	"github.com/freqcap/caddy-freqcap/limiter"
)

func init() {
	caddy.RegisterModule(new(AdminAPI))
}

// AdminAPI serves the frequency caps' support endpoints on Caddy's admin
// endpoint, so that support can answer "why did this user get no push":
//
//	GET    /frequency_cap/<name>/usage?<dimension>=<value>&...
//	DELETE /frequency_cap/<name>/usage?<dimension>=<value>&...
//
// <name> is a handler's name. The query gives dimension values by
// dimension name; every rule whose dimensions are all given is selected.
// GET answers {"name": ..., "rules": [{"rule", "by", "limit", "window",
// "used", "remaining", "reset_after"}, ...]} without recording anything
// (reset_after: seconds until the next unit frees up, or until the
// calendar period ends); a quiet rule answers "quiet" (whether its range
// holds the recipient's time now) and "quiet_until" (seconds until the
// range ends, 0 when not quiet), with limit, used and remaining 0. DELETE
// skips quiet rules, which record nothing. DELETE forgets the records of the selected rules
// (and of any rule that shares their record log: the same dimensions and
// cost) and answers {"name": ..., "reset": [rules]}.
//
// The optional parameter zone (an IANA zone) says in which zone to count
// the rules (calendar or quiet) whose zone is a placeholder such as {json.tz}; by
// default their fallback zone is used, as for a request that names none.
// When a handler has a dimension named zone, the parameter is that
// dimension's value instead.
//
// Errors are JSON {"error": reason, ...}: 404 for an unknown name or path,
// 400 for an unknown dimension, an empty or repeated value, an unknown
// zone, or a query that completes no rule; 405 for another method; 503
// when the store fails.
type AdminAPI struct{}

// CaddyModule returns the Caddy module information.
func (*AdminAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "admin.api.frequency_cap",
		New: func() caddy.Module { return new(AdminAPI) },
	}
}

// Routes implements caddy.AdminRouter.
func (a *AdminAPI) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{{Pattern: adminPrefix, Handler: caddy.AdminHandlerFunc(a.serveHTTP)}}
}

const adminPrefix = "/frequency_cap/"

// adminTimeout bounds a store call of the admin API. It is not on any
// request's path, so it may wait longer than the handler's timeout.
const adminTimeout = 5 * time.Second

func (a *AdminAPI) serveHTTP(w http.ResponseWriter, r *http.Request) error {
	name, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, adminPrefix), "/")
	if name == "" || rest != "usage" {
		return (&failure{status: http.StatusNotFound, reason: "not found: use " + adminPrefix + "<name>/usage?<dimension>=<value>"}).write(w)
	}
	if r.Method != http.MethodGet && r.Method != http.MethodDelete {
		w.Header().Set("Allow", "GET, DELETE")
		return (&failure{status: http.StatusMethodNotAllowed, reason: "method " + r.Method + " not allowed: use GET or DELETE"}).write(w)
	}
	cs := lookupCapSet(name)
	if cs == nil {
		return writeJSON(w, http.StatusNotFound, "application/json", struct {
			Error string `json:"error"`
			Name  string `json:"name"`
		}{"no frequency_cap handler named " + name, name})
	}
	q, fail := cs.query(r.URL.RawQuery)
	if fail != nil {
		return fail.write(w)
	}
	req := q.request()

	ctx, cancel := context.WithTimeout(r.Context(), max(cs.timeout, adminTimeout))
	defer cancel()
	if r.Method == http.MethodDelete {
		if len(req.Checks) > 0 {
			start := time.Now()
			err := cs.store.Reset(ctx, req)
			newStoreOp(cs.name, opReset).observe(start, err)
			if err != nil {
				return storeUnavailable(w, err)
			}
		}
		rules := make([]string, len(req.Checks))
		for i, c := range req.Checks {
			rules[i] = c.Rule.Name
		}
		fields := []zap.Field{zap.String("handler", cs.name), zap.Strings("rules", rules)}
		if cs.logValues {
			fields = append(fields, zap.Object("values", checkValues(req.Checks)))
		}
		cs.logger.Info("usage reset through the admin API", fields...)
		return writeJSON(w, http.StatusOK, "application/json", struct {
			Name  string   `json:"name"`
			Reset []string `json:"reset"`
		}{cs.name, rules})
	}

	d := &limiter.Decision{}
	if len(req.Checks) > 0 {
		start := time.Now()
		var err error
		d, err = cs.store.Usage(ctx, req)
		newStoreOp(cs.name, opUsage).observe(start, err)
		if err != nil {
			return storeUnavailable(w, err)
		}
	}
	out := usageAnswer{Name: cs.name, Rules: make([]ruleUsage, 0, len(q.rules))}
	now := time.Now()
	for _, cr := range q.rules {
		if qr := cr.rule.Quiet; qr != nil {
			c := q.check(cr)
			until, quiet := qr.Until(now, c.Zone)
			secs := ceilSeconds(until)
			out.Rules = append(out.Rules, ruleUsage{
				Rule:       cr.rule.Name,
				By:         cr.rule.By,
				Window:     windowOf(&c),
				ResetAfter: secs,
				Quiet:      &quiet,
				QuietUntil: &secs,
			})
			continue
		}
		i := len(out.Rules) - quietBefore(out.Rules)
		res := d.Results[i]
		out.Rules = append(out.Rules, ruleUsage{
			Rule:       res.Rule.Name,
			By:         res.Rule.By,
			Limit:      res.Limit,
			Window:     windowOf(&req.Checks[i]),
			Used:       res.Used,
			Remaining:  res.Remaining,
			ResetAfter: ceilSeconds(res.Reset),
		})
	}
	return writeJSON(w, http.StatusOK, "application/json", out)
}

// quietBefore counts the quiet rules among rules.
func quietBefore(rules []ruleUsage) int {
	n := 0
	for _, r := range rules {
		if r.Quiet != nil {
			n++
		}
	}
	return n
}

// usageAnswer is the body of a GET.
type usageAnswer struct {
	Name  string      `json:"name"`
	Rules []ruleUsage `json:"rules"`
}

type ruleUsage struct {
	Rule       string   `json:"rule"`
	By         []string `json:"by"`
	Limit      int64    `json:"limit"`
	Window     string   `json:"window"`
	Used       int64    `json:"used"`
	Remaining  int64    `json:"remaining"`
	ResetAfter int64    `json:"reset_after"`
	// Quiet and QuietUntil are a quiet rule's only: whether its range
	// holds now, and the seconds until that range ends (0 when not quiet).
	Quiet      *bool  `json:"quiet,omitempty"`
	QuietUntil *int64 `json:"quiet_until,omitempty"`
}

func storeUnavailable(w http.ResponseWriter, err error) error {
	return (&failure{status: http.StatusServiceUnavailable, reason: "frequency cap store unavailable: " + err.Error()}).write(w)
}

// Interface guards.
var _ caddy.AdminRouter = (*AdminAPI)(nil)
