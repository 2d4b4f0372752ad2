package support

import (
	"net/http"
	"strings"

	"github.com/caddyserver/caddy/v2"

	"github.com/freqcap/caddy-freqcap/caddymodule/internal/reply"
)

func init() {
	caddy.RegisterModule(new(AdminAPI))
}

// AdminAPI serves the frequency caps' support endpoints on Caddy's admin
// endpoint, so that support can answer "why did this user get no push":
//
//	GET    /frequency_cap/
//	GET    /frequency_cap/<name>/usage?<dimension>=<value>&...
//	DELETE /frequency_cap/<name>/usage?<dimension>=<value>&...
//
// GET /frequency_cap/ lists the cap sets of the running config, as the
// console's api/capsets does: {"capsets": [{"name", "store", "dry_run",
// "dimensions", "zoned", "rules": [{"rule", "by", "limit", "window"}]}]}.
//
// <name> is a handler's name. The query gives dimension values by
// dimension name (a '+' is a plus sign, as in a phone number; a space is
// %20); every rule whose dimensions are all given is selected, and no
// other: ?recipient=alice selects the rules by recipient alone, not those
// by recipient and content, which need a content too.
// GET answers {"name": ..., "now": ..., "rules": [{"rule", "by", "limit",
// "window", "used", "remaining", "reset_after", "from", "sends",
// "precision", "exempt"}, ...]} without recording anything (reset_after: seconds
// until the next unit frees up, or until the calendar period ends; from:
// where the window begins; sends: [{"at", "units"}], what the rule counts,
// oldest first, at the record log's precision, which precision states;
// a send's "exempt" is how many of its units exempt sends made, omitted
// when none, and the rule's "exempt" their sum: how much of used the
// exempt requests made). DELETE forgets the records of the selected rules
// (and of any rule that shares their record log: the same dimensions and
// cost) and answers {"name": ..., "reset": [rules]}; given a value, it
// leaves the rules without by alone (shared by every send) and names them
// in "kept".
//
// A rule that reads its zone, limit or cost from a placeholder of each
// request depends on a value no dimension gives: each such placeholder is
// an optional parameter named after it ({http.request.header.X-TZ} is
// http.request.header.X-TZ, {tier_day} is tier_day; see inputsOf), and
// GET /frequency_cap/ lists them as "inputs". Without it, the rule is
// answered with its fallback (zone, limit) or no cost, and its "assumed"
// says so: [{"kind", "param", "value", "note"}]. Given a cost, a rule
// also answers "cost", "admits" and "retry_after" for a send of it. The
// parameter zone (an IANA zone) gives every zone placeholder not given by
// its own; when a handler has a dimension named zone, the parameter is
// that dimension's value instead.
//
//	GET    /frequency_cap/<name>/records?<dimension>=<value>
//	DELETE /frequency_cap/<name>/records?<dimension>=<value>
//
// records lists everything the store holds under one value of a dimension
// that keys records (a rule's first dimension): every rule keyed by it,
// once for each log held (the recipient's own counts; one a content,
// channel or campaign she was sent, with "values" naming it), with the
// fields of a usage rule. "elsewhere" names the rules over the dimension
// that another dimension keys ({"rule", "by", "keyed_by"}): a usage query
// with all their dimensions reads those. DELETE forgets every log listed
// and answers {"name", "dimension", "value", "reset": [{"rules",
// "values"}], "elsewhere"}. It takes one dimension, and zone as usage
// does.
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

func (a *AdminAPI) serveHTTP(w http.ResponseWriter, r *http.Request) error {
	harden(w.Header())
	name, rest, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, adminPrefix), "/")
	if name == "" && rest == "" && (r.Method == http.MethodGet || r.Method == http.MethodHead) {
		return reply.JSON(w, http.StatusOK, "application/json", struct {
			CapSets []capSetEntry `json:"capsets"`
		}{capSetEntries(func(string) bool { return true })})
	}
	switch {
	case name != "" && rest == "usage":
		return serveUsage(w, r, name, "admin API")
	case name != "" && rest == "records":
		return serveRecords(w, r, name, "admin API", false)
	}
	return (&reply.Failure{Status: http.StatusNotFound, Reason: "not found: use " + adminPrefix + "<name>/usage?<dimension>=<value> or " + adminPrefix + "<name>/records?<dimension>=<value>"}).Write(w)
}

// Interface guards.
var _ caddy.AdminRouter = (*AdminAPI)(nil)
