package caddymodule

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/dustin/go-humanize"

	"github.com/freqcap/caddy-freqcap/caddymodule/internal/zones"
	"github.com/freqcap/caddy-freqcap/internal/answer"
	"github.com/freqcap/caddy-freqcap/internal/jsonbatch"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/lease"
)

func init() {
	httpcaddyfile.RegisterHandlerDirective("frequency_cap", parseCaddyfile)
	// After authentication, so a request that fails it spends nobody's
	// quota, and before every directive that routes or answers (handle,
	// handle_path, route, respond, reverse_proxy, ...), so the cap applies
	// wherever it is written in a site block. Caddy's standard order puts
	// forward_auth right after basic_auth: after it is after both.
	httpcaddyfile.RegisterDirectiveOrder("frequency_cap", httpcaddyfile.After, "forward_auth")

	// The console's directive (registered by its own package) is ordered
	// here too: also after authentication, so the console is behind the site's auth
	// without an order line, and before frequency_cap, so that a cap with
	// no matcher never sees the console's requests (the page and its API
	// carry no message: the cap would refuse them 400). Inserting after
	// forward_auth once frequency_cap is there puts the console between
	// the two; both are ordered here, in this order, because Caddy lets
	// a directive be ordered only against one of its standard directives,
	// and the order of two packages' init functions is theirs to choose.
	httpcaddyfile.RegisterDirectiveOrder("frequency_cap_console", httpcaddyfile.After, "forward_auth")
}

func parseCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	handler := new(Handler)
	h.Next() // the directive, where the block starts
	at := fmt.Sprintf("%s:%d", h.File(), h.Line())
	h.Reset()
	if err := handler.UnmarshalCaddyfile(h.Dispenser); err != nil {
		return nil, err
	}
	if err := checkNameUnique(h, handler, at); err != nil {
		return nil, err
	}
	return handler, nil
}

// UnmarshalCaddyfile implements caddyfile.Unmarshaler. Syntax:
//
//	frequency_cap [<matcher>] {
//	    name        <name>
//	    redis       [<url>] [{
//	        url             <url>
//	        address         <host:port>...
//	        cluster
//	        sentinel_master <master>
//	        sentinel_username <user>
//	        sentinel_password <password>
//	        username        <user>
//	        password        <password>
//	        db              <n>
//	        tls
//	        tls_ca          <pem-file>
//	        tls_server_name <name>
//	        tls_insecure_skip_verify
//	        timeout         <duration>
//	        dial_timeout    <duration>
//	        pool_size       <n>
//	        script_only
//	        native_write    on|off
//	    }]
//	    key_prefix  <prefix>
//	    on_error    allow|deny|local [<divisor>]
//	    on_missing  reject|skip [<dimension>...]
//	    exempt      <placeholder> <value>...
//	    skip        <placeholder> <value>...
//	    refund_on   <class-or-code>...
//	    dry_run
//	    max_body    <size>
//	    any_content_type
//	    status_code <code>
//	    answer      problem|apns|fcm|sendgrid|twilio|webpush|expo|gorush
//	    log_values
//	    dimension   <name> <placeholder> [<placeholder>...]
//	    batch       reject|drop
//	    max_batch   <n>
//	    splice      expo
//	    rule <name> {
//	        by       <dimension>...      (none: one count over every send)
//	        limit    <n>|<placeholder> [<fallback-n>]
//	        window   <duration>
//	        calendar day|week|month [<zone>|<placeholder> [<fallback-zone>]]
//	        cost     <n>|<placeholder>
//	        lease    <n>
//	        dry_run
//	    }
//	    rule <name> {
//	        quiet    <HH:MM>-<HH:MM> [<zone>|<placeholder> [<fallback-zone>]]
//	        days     <day>|<day>-<day>...
//	        by       <dimension>...
//	        dry_run
//	    }
//	}
//
// dimension and rule may repeat; a rule has exactly one of window and
// calendar, or is a quiet rule (quiet, optionally days and by; no limit,
// window, calendar or cost). on_error local takes a divisor of at least 1
// (default 1). Every other subdirective may appear once.
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := map[string]bool{}
	// Rules may name dimensions declared further down; an unknown one is
	// reported at its by line once the whole block is read.
	var unknown []pendingDim
	// What depends on the whole block (which dimension is the batch
	// dimension, whether splice has batch drop) is checked at its end and
	// reported at the line concerned: at holds a copy of the dispenser
	// at those lines.
	at := batchLines{dims: map[string]caddyfile.Dispenser{}}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if sub != "dimension" && sub != "rule" {
			if seen[sub] {
				return d.Errf("%s already specified", sub)
			}
			seen[sub] = true
		}
		var err error
		switch sub {
		case "name":
			if h.Name, err = oneArg(d); err == nil {
				err = wrapLine(d, "name %w", limiter.CheckName(h.Name))
			}
		case "redis":
			err = h.unmarshalRedis(d)
		case "key_prefix":
			if h.KeyPrefix, err = oneArg(d); err == nil && h.KeyPrefix == "" {
				// JSON's "" is the field left out, the default: written
				// here it would read as no prefix and be the default.
				err = d.Err(`key_prefix "" is empty, which means the default "freqcap:"; leave key_prefix out for it, or give a prefix`)
			} else if err == nil {
				err = wrapLine(d, "key_prefix %w", limiter.CheckPrefix(h.KeyPrefix))
			}
		case "on_error":
			at.onError = *d
			err = h.unmarshalOnError(d)
		case "exempt":
			at.exempt = *d
			if h.Exempt, err = matchArgs(d, "exempt"); err != nil {
				return err
			}
		case "skip":
			if h.Skip, err = matchArgs(d, "skip"); err != nil {
				return err
			}
		case "on_missing":
			args := d.RemainingArgs()
			switch {
			case len(args) == 0:
				err = d.ArgErr()
			case args[0] != OnMissingReject && args[0] != OnMissingSkip:
				err = d.Errf("on_missing must be %s or %s, not %q", OnMissingReject, OnMissingSkip, args[0])
			case len(args) == 1:
				h.OnMissing = args[0]
			case args[0] == OnMissingSkip:
				// Skip for these dimensions, reject for the others.
				h.SkipMissing = args[1:]
				for _, name := range h.SkipMissing {
					unknown = append(unknown, pendingDim{name, d.Errf("on_missing skip: unknown dimension %q", name)})
				}
			default:
				err = d.ArgErr()
			}
		case "refund_on":
			err = h.unmarshalRefundOn(d)
		case "dry_run":
			h.DryRun, err = true, noArgs(d)
		case "log_values":
			h.LogValues, err = true, noArgs(d)
		case "max_body":
			err = h.unmarshalMaxBody(d)
		case "any_content_type":
			h.AnyContentType, err = true, noArgs(d)
		case "status_code":
			at.statusCode = *d
			err = h.unmarshalStatusCode(d)
		case "answer":
			at.answer = *d
			h.Answer, err = oneOf(d, answer.Names()...)
		case "dimension":
			line := *d
			if err = h.unmarshalDimension(d); err == nil && line.NextArg() {
				at.dims[line.Val()] = line // at the dimension's name
			}
		case "batch":
			at.batch = *d
			h.Batch, err = oneOf(d, BatchReject, BatchDrop)
		case "max_batch":
			at.maxBatch = *d
			h.MaxBatch, err = intArg(d, "max_batch", 1)
			if err == nil && h.MaxBatch > limiter.MaxBatch {
				err = d.Errf("max_batch %d is more than %d", h.MaxBatch, limiter.MaxBatch)
			}
		case "splice":
			at.splice = *d
			h.Splice, err = oneOf(d, SpliceExpo)
		case "rule":
			at.rules = append(at.rules, *d)
			var u []pendingDim
			u, err = h.unmarshalRule(d)
			unknown = append(unknown, u...)
		default:
			return d.Errf("unrecognized subdirective %q", sub)
		}
		if err != nil {
			return err
		}
	}
	for _, u := range unknown {
		if !h.hasDim(u.name) {
			return u.err
		}
	}
	if len(h.Rules) == 0 {
		return d.Err("frequency_cap needs at least one rule")
	}
	if h.OnError == OnErrorLocal && h.Redis == nil {
		return at.onError.Err("on_error local needs a redis store: the embedded store decides every send in this process already")
	}
	for _, name := range slices.Sorted(maps.Keys(at.dims)) {
		if !slices.ContainsFunc(h.Rules, func(r RuleConfig) bool { return slices.Contains(r.By, name) }) {
			line := at.dims[name]
			return line.Errf("%v", unusedDimension(name))
		}
	}
	if err := h.checkLogLines(&at); err != nil {
		return err
	}
	return h.checkBatchLines(&at)
}

// checkLogLines runs the check that provisioning runs on the rules' logs
// (limiter.CheckLogs), so that a rule set no store could keep fails at
// caddy adapt, at the line of its first rule, not at caddy run with no
// line.
func (h *Handler) checkLogLines(at *batchLines) error {
	var rules []*limiter.Rule
	for i := range h.Rules {
		cr, err := compileRule(&h.Rules[i])
		if err != nil {
			return at.rules[i].Errf("%v", err)
		}
		if cr.rule.Quiet == nil {
			rules = append(rules, cr.rule)
		}
	}
	err := limiter.CheckLogs(rules)
	if err == nil {
		if err = lease.CheckRules(rules); err != nil {
			// The error names the leased rule first.
			for i := range h.Rules {
				if strings.HasPrefix(err.Error(), "rule "+h.Rules[i].Name+":") {
					return at.rules[i].Errf("%v", err)
				}
			}
		}
	}
	var big *limiter.LogTooLargeError
	if errors.As(err, &big) {
		for i := range h.Rules {
			if h.Rules[i].Name == big.Rules[0] {
				return at.rules[i].Errf("%v", err)
			}
		}
	}
	if err != nil {
		return at.rules[0].Errf("%v", err)
	}
	return nil
}

// pendingDim is a dimension a rule names that was not declared (yet), with
// the error that reports it at its line.
type pendingDim struct {
	name string
	err  error
}

func (h *Handler) unmarshalOnError(d *caddyfile.Dispenser) error {
	args := d.RemainingArgs()
	if len(args) == 0 {
		return d.ArgErr()
	}
	switch h.OnError = args[0]; {
	case h.OnError == OnErrorLocal && len(args) <= 2:
		if len(args) == 2 {
			n, err := strconv.ParseInt(args[1], 10, 64)
			if err != nil || n < 1 {
				return d.Errf("on_error local divisor %q is not an integer of at least 1", args[1])
			}
			h.LocalDivisor = n
		}
	case (h.OnError == OnErrorAllow || h.OnError == OnErrorDeny) && len(args) == 1:
	case h.OnError == OnErrorAllow || h.OnError == OnErrorDeny || h.OnError == OnErrorLocal:
		return d.ArgErr()
	default:
		return d.Errf("on_error must be allow, deny or local, not %q", h.OnError)
	}
	return nil
}

func (h *Handler) unmarshalRefundOn(d *caddyfile.Dispenser) error {
	h.RefundOn = d.RemainingArgs()
	if len(h.RefundOn) == 0 {
		return d.ArgErr()
	}
	for _, s := range h.RefundOn {
		if _, err := parseStatusMatch(s); err != nil {
			return d.Err(err.Error())
		}
	}
	return nil
}

func (h *Handler) unmarshalMaxBody(d *caddyfile.Dispenser) error {
	s, err := oneArg(d)
	if err != nil {
		return err
	}
	n, err := humanize.ParseBytes(s)
	if err != nil || n == 0 || n > maxMaxBody {
		return d.Errf("max_body %q is not a size such as 1MiB", s)
	}
	h.MaxBody = int64(n)
	return nil
}

func (h *Handler) unmarshalStatusCode(d *caddyfile.Dispenser) error {
	s, err := oneArg(d)
	if err != nil {
		return err
	}
	code, err := strconv.Atoi(s)
	if err != nil || code < 400 || code > 599 {
		return d.Errf("status_code %q is not a 4xx or 5xx status", s)
	}
	h.StatusCode = code
	return nil
}

// unmarshalDimension reads "dimension <name> <placeholder>" and, with
// several placeholders, "dimension <name> <placeholder> <placeholder>...":
// the alternative body fields of one kind of address (see
// Handler.DimensionAlternatives).
func (h *Handler) unmarshalDimension(d *caddyfile.Dispenser) error {
	args := d.RemainingArgs()
	if len(args) < 2 {
		return d.ArgErr()
	}
	name, expr := args[0], args[1]
	if err := limiter.CheckName(name); err != nil {
		return d.Errf("dimension %w", err)
	}
	if h.hasDim(name) {
		return d.Errf("dimension %s already declared", name)
	}
	for _, expr := range args[1:] {
		if err := checkDimension(name, expr); err != nil {
			return d.Errf("%v", err)
		}
	}
	if alts := args[1:]; len(alts) > 1 {
		if _, err := alternativesPath(alts); err != nil {
			return d.Errf("dimension %s: %v", name, err)
		}
		if h.DimensionAlternatives == nil {
			h.DimensionAlternatives = make(map[string][]string)
		}
		h.DimensionAlternatives[name] = alts
		return nil
	}
	if strings.TrimSpace(expr) == "" {
		return d.Errf("dimension %s: empty expression", name)
	}
	if t, err := entryTemplate(expr); err != nil {
		return d.Errf("dimension %s: %v", name, err)
	} else if t == nil {
		if _, err := batchPathOf(expr); err != nil {
			return d.Errf("dimension %s: %v", name, err)
		}
	}
	if h.Dimensions == nil {
		h.Dimensions = make(map[string]string)
	}
	h.Dimensions[name] = expr
	return nil
}

func (h *Handler) unmarshalRule(d *caddyfile.Dispenser) ([]pendingDim, error) {
	if !d.NextArg() {
		return nil, d.ArgErr()
	}
	rc := RuleConfig{Name: d.Val()}
	if err := limiter.CheckName(rc.Name); err != nil {
		return nil, d.Errf("rule %w", err)
	}
	if d.NextArg() {
		return nil, d.ArgErr()
	}
	for _, r := range h.Rules {
		if r.Name == rc.Name {
			return nil, d.Errf("rule %s already defined", rc.Name)
		}
	}
	ruleErr := func(msg string) error { return d.Errf("rule %s: %s", rc.Name, msg) }
	// What a rule lacks is reported at the line that names the rule.
	needLimit := ruleErr("needs limit <n>")
	needWindow := ruleErr("needs window <duration> or calendar day|week|month")
	needQuiet := ruleErr("days needs quiet <HH:MM>-<HH:MM>")
	var unknown []pendingDim
	seen := map[string]bool{}
	// A lease is checked against the whole rule, at its line.
	var leaseLine caddyfile.Dispenser
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if seen[sub] {
			return nil, ruleErr(sub + " already specified")
		}
		seen[sub] = true
		// A placeholder left open is reported at its own line (a copy of
		// the dispenser reads the arguments, so the case below still can).
		args := *d
		for _, a := range args.RemainingArgs() {
			if err := checkBraces(a); err != nil {
				return nil, d.Errf("rule %s: %s: %v", rc.Name, sub, err)
			}
		}
		var err error
		switch sub {
		case "by":
			rc.By = d.RemainingArgs()
			if len(rc.By) == 0 {
				return nil, d.ArgErr()
			}
			if err := limiter.CheckDimensions(rc.By); err != nil {
				return nil, d.Errf("rule %s: %w", rc.Name, err)
			}
			for _, dim := range rc.By {
				if !h.hasDim(dim) {
					unknown = append(unknown, pendingDim{dim, ruleErr("unknown dimension " + strconv.Quote(dim) + " (declare it with dimension " + dim + " <placeholder>)")})
				}
			}
		case "limit":
			if seen["quiet"] {
				return nil, ruleErr(quietExcludes)
			}
			if err := unmarshalLimit(d, &rc); err != nil {
				return nil, err
			}
		case "quiet":
			if seen["limit"] || seen["window"] || seen["calendar"] || seen["cost"] {
				return nil, ruleErr(quietExcludes)
			}
			if err := unmarshalQuiet(d, &rc); err != nil {
				return nil, err
			}
		case "days":
			if rc.Days = d.RemainingArgs(); len(rc.Days) == 0 {
				return nil, d.ArgErr()
			}
			if _, err := limiter.ParseQuiet("00:00-00:01", rc.Days); err != nil {
				return nil, ruleErr(err.Error())
			}
		case "dry_run":
			if rc.DryRun, err = true, noArgs(d); err != nil {
				return nil, err
			}
		case "window":
			if seen["quiet"] {
				return nil, ruleErr(quietExcludes)
			}
			if rc.Window, err = durationArg(d, "rule "+rc.Name+": window"); err != nil {
				return nil, err
			}
			if err := checkWindow(d, &rc); err != nil {
				return nil, err
			}
		case "calendar":
			if seen["quiet"] {
				return nil, ruleErr(quietExcludes)
			}
			if err := unmarshalCalendar(d, &rc); err != nil {
				return nil, err
			}
			if err := checkWindow(d, &rc); err != nil {
				return nil, err
			}
		case "cost":
			if seen["quiet"] {
				return nil, ruleErr(quietExcludes)
			}
			if rc.Cost, err = oneArg(d); err != nil {
				return nil, err
			}
			if !isPlaceholder(rc.Cost) {
				if n, perr := strconv.ParseInt(rc.Cost, 10, 64); perr != nil || n < 0 || n > limiter.MaxCost {
					return nil, ruleErr("cost " + strconv.Quote(rc.Cost) + " is neither an integer from 1 to " + strconv.Itoa(limiter.MaxCost) + " nor a placeholder")
				} else if n == 0 {
					return nil, ruleErr(zeroCost)
				}
			}
		case "lease":
			leaseLine = *d
			n, err := intArg(d, "rule "+rc.Name+": lease", 1)
			if err != nil {
				return nil, err
			}
			rc.Lease = int64(n)
		default:
			return nil, d.Errf("unrecognized rule subdirective %q", sub)
		}
	}
	if seen["lease"] {
		if err := checkLease(&rc); err != nil {
			return nil, leaseLine.Errf("rule %s: %v", rc.Name, err)
		}
	}
	switch {
	case len(rc.Days) > 0 && rc.Quiet == "":
		return nil, needQuiet
	case rc.Quiet != "":
	case rc.Limit == 0 && rc.LimitPlaceholder == "":
		return nil, needLimit
	case rc.Window == 0 && rc.Calendar == "":
		return nil, needWindow
	}
	h.Rules = append(h.Rules, rc)
	return unknown, nil
}

const quietExcludes = "quiet excludes limit, window, calendar and cost"

// unmarshalLimit parses limit <n>, or limit <placeholder> [<fallback>].
func unmarshalLimit(d *caddyfile.Dispenser, rc *RuleConfig) error {
	args := d.RemainingArgs()
	if len(args) == 0 || len(args) > 2 || (len(args) == 2 && !isPlaceholder(args[0])) {
		return d.ArgErr()
	}
	s := args[len(args)-1]
	if len(args) == 1 && isPlaceholder(s) {
		rc.LimitPlaceholder = s
		return nil
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 1 || n > limiter.MaxLimit {
		return d.Errf("rule %s: limit %q is not an integer from 1 to %d (2^40)", rc.Name, s, limiter.MaxLimit)
	}
	if len(args) == 2 {
		rc.LimitPlaceholder = args[0]
	}
	rc.Limit = n
	return nil
}

// unmarshalQuiet parses quiet <HH:MM>-<HH:MM> [<zone>|<placeholder>
// [<fallback-zone>]].
func unmarshalQuiet(d *caddyfile.Dispenser, rc *RuleConfig) error {
	args := d.RemainingArgs()
	if len(args) < 1 || len(args) > 3 {
		return d.ArgErr()
	}
	if _, err := limiter.ParseQuiet(args[0], nil); err != nil {
		return d.Errf("rule %s: %v", rc.Name, err)
	}
	rc.Quiet = args[0]
	return unmarshalZone(d, rc, args[1:])
}

// checkWindow checks the window of rc as read so far (a window, a calendar
// or both), reporting at the current line.
func checkWindow(d *caddyfile.Dispenser, rc *RuleConfig) error {
	w := limiter.Window{Duration: time.Duration(rc.Window)}
	if rc.Calendar != "" {
		w.Unit, _ = limiter.ParseUnit(rc.Calendar) // unmarshalCalendar checked it
	}
	return wrapLine(d, "rule "+rc.Name+": %w", w.Validate())
}

func unmarshalCalendar(d *caddyfile.Dispenser, rc *RuleConfig) error {
	args := d.RemainingArgs()
	if len(args) < 1 || len(args) > 3 {
		return d.ArgErr()
	}
	if _, err := limiter.ParseUnit(args[0]); err != nil {
		return d.Errf("rule %s: %v", rc.Name, err)
	}
	rc.Calendar = args[0]
	return unmarshalZone(d, rc, args[1:])
}

// unmarshalZone parses [<zone>|<placeholder> [<fallback-zone>]].
func unmarshalZone(d *caddyfile.Dispenser, rc *RuleConfig, args []string) error {
	if len(args) > 0 {
		rc.Zone = args[0]
		if !isPlaceholder(rc.Zone) {
			if _, err := zones.Load(rc.Zone); err != nil {
				return d.Errf("rule %s: %v", rc.Name, err)
			}
		}
	}
	if len(args) > 1 {
		if !isPlaceholder(rc.Zone) {
			return d.Errf("rule %s: a fallback zone needs a placeholder zone such as {json.tz}", rc.Name)
		}
		rc.FallbackZone = args[1]
		if _, err := zones.Load(rc.FallbackZone); err != nil {
			return d.Errf("rule %s: fallback zone: %v", rc.Name, err)
		}
	}
	return nil
}

// wrapLine wraps err, when there is one, with what it concerns (format has
// one %w) and the current line.
func wrapLine(d *caddyfile.Dispenser, format string, err error) error {
	if err == nil {
		return nil
	}
	return d.Errf(format, err)
}

func oneArg(d *caddyfile.Dispenser) (string, error) {
	if !d.NextArg() {
		return "", d.ArgErr()
	}
	v := d.Val()
	if d.NextArg() {
		return "", d.ArgErr()
	}
	return v, nil
}

func noArgs(d *caddyfile.Dispenser) error {
	if d.NextArg() {
		return d.ArgErr()
	}
	return nil
}

func oneOf(d *caddyfile.Dispenser, choices ...string) (string, error) {
	sub := d.Val()
	v, err := oneArg(d)
	if err != nil {
		return "", err
	}
	for _, c := range choices {
		if v == c {
			return v, nil
		}
	}
	return "", d.Errf("%s must be %s, not %q", sub, strings.Join(choices, " or "), v)
}

func intArg(d *caddyfile.Dispenser, what string, least int) (int, error) {
	s, err := oneArg(d)
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < least {
		return 0, d.Errf("%s %q is not an integer of at least %d", what, s, least)
	}
	return n, nil
}

func durationArg(d *caddyfile.Dispenser, what string) (caddy.Duration, error) {
	args := d.RemainingArgs()
	if len(args) != 1 {
		// "window 5 minutes": say what is wrong, not just the count.
		return 0, d.Errf("%s takes one duration such as 5m or 24h, not %q", what, strings.Join(args, " "))
	}
	s := args[0]
	dur, err := caddy.ParseDuration(s)
	if err != nil {
		return 0, d.Errf("%s %q is not a duration such as 1m or 24h: %v", what, s, err)
	}
	if dur < 0 {
		return 0, d.Errf("%s %q must not be negative", what, s)
	}
	return caddy.Duration(dur), nil
}

// batchLines holds copies of the dispenser at the lines that the batch
// checks at the block's end report at; a zero Dispenser is a line not
// written.
type batchLines struct {
	dims                            map[string]caddyfile.Dispenser
	rules                           []caddyfile.Dispenser // in the order of h.Rules
	batch, splice, maxBatch, exempt caddyfile.Dispenser
	answer, statusCode              caddyfile.Dispenser
	onError                         caddyfile.Dispenser
}

// checkBatchLines finds the batch dimension as compileBatch does (the
// first wildcard dimension in the order the rules name dimensions) and
// reports, at its line, a wildcard dimension that does not follow it, a
// wildcard cost, limit or zone that does not (at its rule's line) or an
// exempt one, and batch, max_batch or splice lines that cannot apply: a
// config the Caddyfile accepts must not fail at load with an error that
// names no line.
func (h *Handler) checkBatchLines(at *batchLines) error {
	var batch *jsonbatch.Path
	var batchName string
	var plain []string // the dimensions read once a request (templates too), in order
	seen := map[string]bool{}
	for _, rc := range h.Rules {
		for _, name := range rc.By {
			if seen[name] {
				continue
			}
			seen[name] = true
			line := at.dims[name]
			if t, _ := entryTemplate(h.Dimensions[name]); t != nil && h.DimensionAlternatives[name] == nil {
				if batch == nil {
					return line.Errf("dimension %s: %q reads a wildcard path within other text or beside other paths, which the batch dimension (the first with a wildcard, in the order the rules name dimensions) cannot: its entries are the values of one path", name, h.Dimensions[name])
				}
				for _, part := range t {
					if part.path == nil {
						continue
					}
					if err := batch.CheckDimension(part.path); err != nil {
						return line.Errf("dimension %s: %v", name, err)
					}
				}
				plain = append(plain, name)
				continue
			}
			p, _ := h.dimBatchPath(name) // checked at its line
			switch {
			case p == nil:
				plain = append(plain, name)
			case batch == nil:
				batch, batchName = p, name
				if _, err := jsonbatch.SFStringList([]string{p.String()}); err != nil {
					return line.Errf("dimension %s: %v", name, err)
				}
			default:
				if err := batch.CheckDimension(p); err != nil {
					return line.Errf("dimension %s: %v", name, err)
				}
			}
		}
	}
	if batch != nil && batch.StartsWild() {
		for _, name := range plain {
			if err := notInAnArray(h.Dimensions[name], h.dimensionText(batchName)); err != nil {
				line := at.dims[name]
				return line.Errf("dimension %s: %v", name, err)
			}
		}
	}
	// A cost, limit, zone or exempt placeholder with a wildcard must
	// follow the batch dimension too (see compileBatch).
	check := func(line *caddyfile.Dispenser, what, expr string) error {
		p, err := wildcardPath(expr)
		switch {
		case err != nil:
		case p == nil:
			return nil
		case batch == nil:
			err = fmt.Errorf("%q has a wildcard path, but no dimension is a batch dimension (a {json.*} path with a * segment)", expr)
		default:
			err = batch.CheckDimension(p)
		}
		if err != nil {
			return line.Errf("%s: %v", what, err)
		}
		return nil
	}
	for i := range h.Rules {
		rc := &h.Rules[i]
		for _, e := range [...][2]string{{"cost", rc.Cost}, {"limit", rc.LimitPlaceholder}, {"zone", rc.Zone}} {
			if err := check(&at.rules[i], "rule "+rc.Name+": "+e[0], e[1]); err != nil {
				return err
			}
		}
	}
	if h.Exempt != nil {
		if err := check(&at.exempt, "exempt", h.Exempt.Placeholder); err != nil {
			return err
		}
	}
	switch {
	case batch == nil && h.Batch != "":
		return at.batch.Errf("batch needs a batch dimension (a {json.*} path with a * segment, such as {json.*.to})")
	case batch == nil && h.Splice != "":
		return at.splice.Errf("splice needs a batch dimension (a {json.*} path with a * segment, such as {json.*.to})")
	case batch == nil && h.MaxBatch != 0:
		return at.maxBatch.Errf("max_batch needs a batch dimension (a {json.*} path with a * segment, such as {json.*.to})")
	case h.Splice != "" && h.Batch != BatchDrop:
		return at.splice.Errf("splice %s needs batch drop (only dropped recipients are spliced back)", h.Splice)
	case h.Answer != "" && h.Answer != answer.Default && h.StatusCode != 0:
		return at.statusCode.Errf("status_code applies to answer %s only: answer %s denies with its provider's own status", answer.Default, h.Answer)
	}
	if err := spliceClash(h.Answer, h.Splice); err != nil {
		return at.splice.Err(err.Error())
	}
	return nil
}

// matchArgs reads the arguments of exempt or skip (what): a placeholder
// and the values that match.
func matchArgs(d *caddyfile.Dispenser, what string) (*ExemptConfig, error) {
	args := d.RemainingArgs()
	if len(args) < 2 {
		return nil, d.Errf("%s needs a placeholder and at least one value", what)
	}
	if err := checkMatchPlaceholder(what, args[0]); err != nil {
		return nil, d.Errf("%v", err)
	}
	if err := checkMatchValues(what, args[1:]); err != nil {
		return nil, d.Errf("%v", err)
	}
	return &ExemptConfig{Placeholder: args[0], Values: args[1:]}, nil
}
