// Package caddymodule is the Caddy glue of caddy-freqcap: the
// http.handlers.frequency_cap module, its Caddyfile directive
// frequency_cap, and the {json.*} and {form.*} placeholders.
package caddymodule

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/freqcap/caddy-freqcap/limiter"
)

func init() {
	caddy.RegisterModule(&Handler{})
}

// Handler puts frequency caps in front of the next handler (usually
// reverse_proxy). For each request it resolves the dimensions, checks every
// rule in one atomic decision, and either passes the request on unchanged,
// with its quota in the RateLimit headers of the response, or answers 429
// with a problem+json body naming the rule that refused it.
//
// After the decision, these placeholders are set:
//
//	{http.frequency_cap.rule}         the rule that denied, or empty
//	{http.frequency_cap.retry_after}  seconds until it would admit, 0 if admitted
//	{http.frequency_cap.remaining}    what the tightest rule has left
type Handler struct {
	// Name names this cap set in logs, metrics and the admin API: a letter
	// or '_', then letters, digits, '_', '.', '-'. Default "default".
	Name string `json:"name,omitempty"`

	// Redis keeps the counts in Redis (standalone, Sentinel or Cluster),
	// shared by every gateway that points at it. By default counts are
	// kept in this process's memory.
	Redis *RedisConfig `json:"redis,omitempty"`

	// KeyPrefix starts every key the store writes, so that cap sets or
	// applications can share one Redis. Default "freqcap:".
	KeyPrefix string `json:"key_prefix,omitempty"`

	// OnError says what happens to a request when the store fails or does
	// not answer within its timeout: "allow" passes it on (the failure is
	// logged), "deny" answers 503 with a JSON reason. Default "allow".
	OnError string `json:"on_error,omitempty"`

	// OnMissing says what happens when a dimension's value is empty:
	// "reject" answers 400 with a JSON reason naming the dimension, "skip"
	// leaves out the rules that use it. Default "reject".
	OnMissing string `json:"on_missing,omitempty"`

	// RefundOn lists the response statuses that give an admitted request's
	// quota back: classes ("5xx") or codes ("429"). When set, a request
	// that gets no response at all (the next handler fails) is refunded
	// too. Default: nothing is ever refunded.
	RefundOn []string `json:"refund_on,omitempty"`

	// DryRun decides and counts as if live but never blocks: a request
	// that would be denied passes, and the quota headers still say what a
	// live run would. Default false.
	DryRun bool `json:"dry_run,omitempty"`

	// MaxBody is the most request body bytes read for the {json.*} and
	// {form.*} placeholders; a longer body is answered 413. The body is
	// read only when some dimension, cost or zone needs it. Default 1 MiB.
	MaxBody int64 `json:"max_body,omitempty"`

	// StatusCode is the status of a denial (400-599). Default 429.
	StatusCode int `json:"status_code,omitempty"`

	// LogValues lets debug logs show dimension values, such as recipients.
	// Default false: values are never logged.
	LogValues bool `json:"log_values,omitempty"`

	// Dimensions maps each dimension name to the placeholder expression
	// that gives a request's value: any Caddy placeholder, plus
	// {json.<path>} (a field of a JSON body; dotted path, array indices:
	// {json.message.to.0}) and {form.<field>} (a field of a
	// application/x-www-form-urlencoded body). Names are a letter or '_',
	// then letters, digits, '_', '.', '-'.
	Dimensions map[string]string `json:"dimensions,omitempty"`

	// Rules are the caps. A request passes only if every rule admits it;
	// then every rule counts it, atomically.
	Rules []RuleConfig `json:"rules,omitempty"`

	dims     []dimension
	rules    []compiledRule
	needs    int
	refundOn []statusMatch
	timeout  time.Duration
	store    limiter.Store
	storeKey string
	logger   *zap.Logger
	// lastWarn throttles store-failure warnings to one a second.
	lastWarn   atomic.Int64
	suppressed atomic.Int64
}

// CaddyModule returns the Caddy module information.
func (*Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.frequency_cap",
		New: func() caddy.Module { return new(Handler) },
	}
}

// Provision fills in defaults, compiles the rules and takes the store from
// the pool; it does not connect to Redis.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	if h.Name == "" {
		h.Name = DefaultName
	}
	if h.KeyPrefix == "" {
		h.KeyPrefix = DefaultKeyPrefix
	}
	if h.OnError == "" {
		h.OnError = OnErrorAllow
	}
	if h.OnMissing == "" {
		h.OnMissing = OnMissingReject
	}
	if h.MaxBody == 0 {
		h.MaxBody = DefaultMaxBody
	}
	if h.StatusCode == 0 {
		h.StatusCode = DefaultStatusCode
	}
	for _, s := range h.RefundOn {
		m, err := parseStatusMatch(s)
		if err != nil {
			return err
		}
		h.refundOn = append(h.refundOn, m)
	}
	if err := h.compile(); err != nil {
		return fmt.Errorf("frequency_cap %s: %w", h.Name, err)
	}

	var cfg *limiter.RedisConfig
	h.timeout = limiter.DefaultTimeout
	if h.Redis != nil {
		c := h.Redis.resolve(caddy.NewReplacer())
		if err := c.Validate(); err != nil {
			return fmt.Errorf("frequency_cap %s: %w", h.Name, err)
		}
		cfg = &c
		h.timeout = c.EffectiveTimeout()
	}
	if err := h.acquireStore(cfg); err != nil {
		return fmt.Errorf("frequency_cap %s: %w", h.Name, err)
	}
	return nil
}

// Validate checks the settings that compile does not.
func (h *Handler) Validate() error {
	if !limiter.ValidDimensionName(h.Name) {
		return fmt.Errorf("frequency_cap: invalid name %q (a letter or '_', then letters, digits, '_', '.', '-')", h.Name)
	}
	if h.OnError != OnErrorAllow && h.OnError != OnErrorDeny {
		return fmt.Errorf("frequency_cap %s: on_error must be allow or deny, not %q", h.Name, h.OnError)
	}
	if h.OnMissing != OnMissingReject && h.OnMissing != OnMissingSkip {
		return fmt.Errorf("frequency_cap %s: on_missing must be reject or skip, not %q", h.Name, h.OnMissing)
	}
	if h.MaxBody < 0 {
		return fmt.Errorf("frequency_cap %s: max_body must not be negative", h.Name)
	}
	if h.StatusCode < 400 || h.StatusCode > 599 {
		return fmt.Errorf("frequency_cap %s: status_code %d is not a 4xx or 5xx status", h.Name, h.StatusCode)
	}
	if len(h.rules) == 0 {
		return fmt.Errorf("frequency_cap %s: no rules", h.Name)
	}
	return nil
}

// Cleanup gives the store back to the pool; it is safe after a failed
// Provision.
func (h *Handler) Cleanup() error {
	return h.releaseStore()
}

// ServeHTTP implements caddyhttp.MiddlewareHandler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if h.needs != 0 {
		b, fail := readBody(r, h.needs, h.MaxBody)
		if fail != nil {
			return fail.write(w)
		}
		repl.Map(b.provide)
	}

	req, fail := h.request(repl)
	if fail != nil {
		return fail.write(w)
	}
	if len(req.Checks) == 0 {
		return next.ServeHTTP(w, r)
	}

	ctx, cancel := context.WithTimeout(r.Context(), h.timeout)
	d, err := h.store.Decide(ctx, req)
	cancel()
	if err != nil {
		h.warnStore("deciding", err)
		if h.OnError == OnErrorDeny {
			return (&failure{status: http.StatusServiceUnavailable, reason: "frequency cap store unavailable"}).write(w)
		}
		return next.ServeHTTP(w, r)
	}

	h.setPlaceholders(repl, d)
	setQuotaHeaders(w.Header(), d)
	h.logDecision(req, d)
	if !d.Allowed {
		if !h.DryRun {
			return writeDenial(w, h.StatusCode, req, d)
		}
		if ce := h.logger.Check(zapcore.InfoLevel, "dry run: would deny"); ce != nil {
			ce.Write(zap.String("rule", d.Results[d.Denier].Rule.Name), zap.Duration("retry_after", d.RetryAfter))
		}
	}
	if len(h.refundOn) == 0 || d.ID == "" {
		return next.ServeHTTP(w, r)
	}
	return h.serveRefundable(w, r, next, d.ID)
}

// request resolves the dimensions, costs and zones of every rule that
// applies to the request.
func (h *Handler) request(repl *caddy.Replacer) (*limiter.Request, *failure) {
	values := make([]string, len(h.dims))
	for i, d := range h.dims {
		values[i] = repl.ReplaceAll(d.expr, "")
		if values[i] == "" && h.OnMissing == OnMissingReject {
			return nil, &failure{status: http.StatusBadRequest, reason: "missing value for dimension " + d.name, dimension: d.name}
		}
	}
	req := &limiter.Request{Checks: make([]limiter.Check, 0, len(h.rules))}
rules:
	for i := range h.rules {
		cr := &h.rules[i]
		c := limiter.Check{Rule: cr.rule, Values: make([]string, len(cr.dims)), Cost: cr.cost}
		for j, di := range cr.dims {
			if values[di] == "" {
				continue rules
			}
			c.Values[j] = values[di]
		}
		if cr.costExpr != "" {
			s := repl.ReplaceAll(cr.costExpr, "")
			n, err := strconv.ParseInt(s, 10, 64)
			if err != nil || n < 0 {
				return nil, &failure{status: http.StatusBadRequest, reason: fmt.Sprintf("cost of rule %s is %q, not a non-negative integer", cr.rule.Name, s), rule: cr.rule.Name}
			}
			c.Cost = n
		}
		if cr.zoneExpr != "" {
			c.Zone = requestZone(repl.ReplaceAll(cr.zoneExpr, ""))
		}
		req.Checks = append(req.Checks, c)
	}
	return req, nil
}

// serveRefundable passes an admitted request on and refunds it, once, when
// its response status matches refund_on or it gets no response.
func (h *Handler) serveRefundable(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, id string) error {
	rec := newStatusRecorder(w)
	err := next.ServeHTTP(rec, r)
	status := rec.status
	if status == 0 && err == nil {
		status = http.StatusOK
	}
	if err != nil || matchesAny(h.refundOn, status) {
		// The client may be gone; the refund is still owed.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.timeout)
		_, rerr := h.store.Refund(ctx, id)
		cancel()
		if rerr != nil {
			h.warnStore("refunding", rerr)
		}
	}
	return err
}

func (h *Handler) setPlaceholders(repl *caddy.Replacer, d *limiter.Decision) {
	rule, retry := "", int64(0)
	if d.Denier >= 0 {
		rule, retry = d.Results[d.Denier].Rule.Name, retryAfter(d.RetryAfter)
	}
	repl.Set("http.frequency_cap.rule", rule)
	repl.Set("http.frequency_cap.retry_after", retry)
	repl.Set("http.frequency_cap.remaining", d.Results[tightest(d)].Remaining)
}

func (h *Handler) logDecision(req *limiter.Request, d *limiter.Decision) {
	ce := h.logger.Check(zapcore.DebugLevel, "frequency cap decision")
	if ce == nil {
		return
	}
	fields := []zap.Field{zap.Bool("allowed", d.Allowed), zap.Int("rules", len(d.Results))}
	if d.Denier >= 0 {
		fields = append(fields, zap.String("rule", d.Results[d.Denier].Rule.Name), zap.Duration("retry_after", d.RetryAfter))
	}
	if h.LogValues {
		vals := make(map[string]string)
		for _, c := range req.Checks {
			for i, dim := range c.Rule.By {
				vals[dim] = c.Values[i]
			}
		}
		fields = append(fields, zap.Any("values", vals))
	}
	ce.Write(fields...)
}

// warnStore logs a store failure at most once a second, with how many were
// not logged since.
func (h *Handler) warnStore(doing string, err error) {
	now := time.Now().UnixNano()
	last := h.lastWarn.Load()
	if now-last < int64(time.Second) || !h.lastWarn.CompareAndSwap(last, now) {
		h.suppressed.Add(1)
		return
	}
	h.logger.Warn("frequency cap store failed",
		zap.String("doing", doing),
		zap.String("on_error", h.OnError),
		zap.Error(err),
		zap.Int64("suppressed", h.suppressed.Swap(0)))
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
	_ caddyfile.Unmarshaler       = (*Handler)(nil)
)
