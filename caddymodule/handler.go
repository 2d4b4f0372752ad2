// Package caddymodule is the Caddy glue of caddy-freqcap: the
// http.handlers.frequency_cap module, its Caddyfile directive
// frequency_cap, and the {json.*} and {form.*} placeholders.
package caddymodule

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"

	"github.com/freqcap/caddy-freqcap/caddymodule/internal/capset"
	"github.com/freqcap/caddy-freqcap/caddymodule/internal/reply"
	"github.com/freqcap/caddy-freqcap/caddymodule/internal/zones"
	"github.com/freqcap/caddy-freqcap/internal/answer"
	"github.com/freqcap/caddy-freqcap/internal/jsonbatch"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/redisstore"
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
// After the decision, these placeholders are set for the handlers that
// follow, handle_errors and the access log:
//
//	{http.frequency_cap.rule}         the rule that denied, or empty
//	{http.frequency_cap.retry_after}  seconds until it would admit, 0 if admitted
//	{http.frequency_cap.remaining}    what the tightest rule has left, or
//	                                  empty when nothing was decided
//
// Every decision is counted in Caddy's metrics (see metrics.go), and the
// admin API (AdminAPI) looks up and resets the usage of a cap set by Name.
type Handler struct {
	// Name names this cap set in logs, metrics and the admin API: a letter
	// or '_', then letters, digits, '_', '.', '-'. Default "default".
	Name string `json:"name,omitempty"`

	// Redis keeps the counts in Redis (standalone, Sentinel or Cluster),
	// shared by every gateway that points at it. By default counts are
	// kept in this process's memory.
	Redis *RedisConfig `json:"redis,omitempty"`

	// KeyPrefix starts every key the store writes (no braces: the first
	// dimension's value is the Redis Cluster hash tag), so that cap sets or
	// applications can share one Redis. Default "freqcap:".
	KeyPrefix string `json:"key_prefix,omitempty"`

	// OnError says what happens to a request when the store fails or does
	// not answer within its timeout: "allow" passes it on (the failure is
	// logged), "deny" answers 503 with a JSON reason, "local" (Redis
	// only) decides it in a store in this process's memory with the same
	// rules, each limit divided by LocalDivisor. The switch is per
	// decision, costs no wait beyond the timeout, and decisions go back to
	// Redis as soon as it answers; what was admitted locally is not copied
	// to Redis. Default "allow".
	OnError string `json:"on_error,omitempty"`

	// LocalDivisor divides every limit in the local store of on_error
	// local (rounded up, at least 1), so that N gateways deciding locally
	// together stay near the shared limit: set it to the number of
	// gateways. Only with on_error local. Default 1.
	LocalDivisor int64 `json:"local_divisor,omitempty"`

	// Exempt admits the requests it matches past every rule and quiet
	// range, recording them in every rule as any admission; they are
	// counted in the metrics as exempt. A request that should neither be
	// capped nor counted is left out with the directive's matcher.
	// Default: no request is exempt.
	Exempt *ExemptConfig `json:"exempt,omitempty"`

	// Skip passes the requests it matches on without a decision: nothing
	// recorded, no quota fields; they are counted in
	// caddy_frequency_cap_skipped_total. For a request the provider
	// delivers nothing of, read from the body where a matcher cannot:
	// FCM's validate_only, SendGrid's sandbox_mode. Default: none.
	Skip *ExemptConfig `json:"skip,omitempty"`

	// OnMissing says what happens when a dimension's value is empty:
	// "reject" answers 400 with a JSON reason naming the dimension, "skip"
	// leaves out the rules that use it. Default "reject".
	OnMissing string `json:"on_missing,omitempty"`

	// SkipMissing lists dimensions whose missing value leaves out the
	// rules that use them, whatever OnMissing says: a message's text, say,
	// which a data-only push has none of, while a push without a recipient
	// is still refused. Caddyfile: on_missing skip <dimension>...
	// Default: none.
	SkipMissing []string `json:"skip_missing,omitempty"`

	// RefundOn lists the response statuses that give an admitted request's
	// quota back: classes ("5xx") or codes ("429"). When set, a request
	// that gets no response at all (the next handler fails) is refunded
	// too, but never one whose upstream call was cut off (it ran 30 s past
	// its sender's going), whatever the classes (reverse_proxy then writes
	// 499, which "4xx" matches): the upstream may have it and still send
	// it. A sender that hangs up sooner has its send passed on all the
	// same, and refunded by the upstream's status.
	// Default: nothing is ever refunded.
	RefundOn []string `json:"refund_on,omitempty"`

	// DryRun decides and counts as if live but never blocks: a request
	// that would be denied passes, the quota headers still say what a live
	// run would, and the denial that did not happen is logged at info and
	// counted in the metrics as dry_run_deny. Default false.
	DryRun bool `json:"dry_run,omitempty"`

	// MaxBody is the most request body bytes read for the {json.*} and
	// {form.*} placeholders; a longer body is answered 413. The body is
	// read only when some dimension, cost or zone needs it. Default 1 MiB.
	MaxBody int64 `json:"max_body,omitempty"`

	// AnyContentType reads the body in the format the placeholders ask
	// for ({json.*} or {form.*}) whatever Content-Type it declares, for an
	// upstream that parses it so (gorush binds JSON whatever the type).
	// Default false: a body that declares another format is answered 415,
	// since an upstream that parses by Content-Type would read other
	// values than the ones counted (a form body hides "&to=victim" in a
	// JSON string). A body that declares no type is read either way.
	AnyContentType bool `json:"any_content_type,omitempty"`

	// StatusCode is the status of a denial (400-599) in the problem
	// answer style; the other styles answer with their provider's own.
	// Default 429.
	StatusCode int `json:"status_code,omitempty"`

	// Answer is the style of every answer the handler writes itself (a
	// denial, and a 400, 413, 415 or 503 about the request), so that the
	// provider SDK in front of the gateway reports it as that provider's
	// own error: "problem" (RFC 9457 problem+json denials, JSON reasons
	// otherwise), "apns", "fcm", "sendgrid", "twilio", "webpush",
	// "expo" (a denial is a 200 with one MessageRateExceeded error
	// ticket per recipient, and never reaches the upstream) or "gorush"
	// (a denied batch is a 200 with one failed-push log per token, and
	// never reaches the upstream). Under batch drop, expo and gorush
	// also report the dropped recipients in the upstream's answer. See
	// docs/configuration.md, Answer styles. Default "problem".
	Answer string `json:"answer,omitempty"`

	// LogValues lets the denial logs (debug; info under dry_run) and the
	// admin API's reset log show dimension values, such as recipients.
	// Default false: values are never logged.
	LogValues bool `json:"log_values,omitempty"`

	// Dimensions maps each dimension name to the placeholder expression
	// that gives a request's value: any Caddy placeholder, plus
	// {json.<path>} (a field of a JSON body; dotted path, array indices:
	// {json.message.to.0}) and {form.<field>} (a field of a
	// application/x-www-form-urlencoded body). A {json.<path>} with "*"
	// segments ({json.*.to}) names every recipient of a batch send: the
	// first such dimension in the order the rules name dimensions is the
	// batch dimension (see Batch). Names are a letter or '_', then
	// letters, digits, '_', '.', '-'.
	Dimensions map[string]string `json:"dimensions,omitempty"`

	// DimensionAlternatives maps a dimension name to the placeholders of
	// the alternative body fields an API takes one kind of address in,
	// two or more: ["{json.notifications.*.tokens.*}",
	// "{json.notifications.*.to}"]. Each is one {json.<path>},
	// {fcm_topics.<path>}, {fcm_topic.<path>} or {email.<path>}
	// placeholder; the dimension's entries are the
	// values every one of them yields, in body order, and a message is
	// missing it only when none yields one. Such a dimension is a batch
	// dimension (see Batch). A name is declared in Dimensions or here,
	// not both: one expression with spaces in Dimensions is text, as it
	// always was. Default: none.
	DimensionAlternatives map[string][]string `json:"dimension_alternatives,omitempty"`

	// Rules are the caps. A request passes only if every rule admits it;
	// then every rule counts it, atomically.
	Rules []RuleConfig `json:"rules,omitempty"`

	// Batch says what happens to a batch send (a body with many
	// recipients, named by a dimension whose {json.*} path holds a "*"
	// segment; see docs/configuration.md, Batches) when some of its
	// recipient entries are denied: "reject" answers 429 listing them and
	// records nothing for any entry; "drop" removes them from the body
	// before it is passed on and names them in the Frequency-Cap-Dropped
	// response header (a batch whose every entry is denied is answered as
	// under reject). Only with a wildcard dimension. Default "reject".
	Batch string `json:"batch,omitempty"`

	// MaxBatch is the most recipient entries a batch may hold (1 to
	// 65535); a body with more is answered 413. Only with a wildcard
	// dimension. Default 1000.
	MaxBatch int `json:"max_batch,omitempty"`

	// Splice makes a positional answer whole again after batch drop
	// removed recipients: "expo" puts an Expo MessageRateExceeded ticket
	// at each dropped recipient's place in the upstream's "data" array.
	// Only with batch drop. Default "": the answer is passed on as it is.
	Splice string `json:"splice,omitempty"`

	style *answer.Style // Answer's
	// denyStyle writes denials: style, or expo's under splice expo,
	// whose all-capped batch is answered with tickets as Expo would.
	denyStyle *answer.Style
	// splicer reports the entries batch drop removed in the upstream's
	// answer (splice expo; answer expo or gorush under batch drop), or
	// is nil.
	splicer    *answer.Style
	dims       []capset.Dimension
	skipDims   []bool // by index of dims: in SkipMissing
	watch      *missingWatch
	rules      []compiledRule
	batch      *batchConfig // nil unless a dimension has a wildcard path
	needs      int
	jsonPaths  *jsonbatch.Folds // every {json.<path>} the cap set reads
	formFields []string         // every {form.<field>} it reads
	// queryParams and headerNames are the query parameters and header
	// fields its placeholders read ({http.request.uri.query.<name>},
	// {http.request.header.<name>}): each must come at most once.
	queryParams, headerNames []string
	// readsPath: some placeholder reads the request's path, which must
	// then be in the one form every reader resolves alike (uncleanPath).
	readsPath bool
	// lowers: some placeholder is a {lower.*} (lower.go).
	lowers bool
	// keying marks the dimensions some rule keys its records by (see
	// keyvalues.go); keyPaths holds, for those, the {json.<path>} they
	// read without a wildcard.
	keying   []bool
	keyPaths [][]string
	// frames holds, by dimension, its expression's text around its
	// placeholders ("user:" of "user:{json.to}"; "" without text): a value
	// that is only that text read nothing, and is missing (see unframed).
	frames   []string
	skip     map[string]bool // Skip's values
	exempt   map[string]bool // Exempt.Values
	refundOn []statusMatch
	timeout  time.Duration
	store    limiter.Store
	storeKey string
	localKey string // on_error local's store, or ""
	// keySpace names the keys its store writes, however the config spells
	// the server (see keySpaces).
	keySpace string
	logger   *zap.Logger
	metrics  *handlerMetrics
	warns    *storeWarnings
	// locals notes the decisions made locally under on_error local.
	locals *storeWarnings
	// outage logs the store answering again after it failed.
	outage *storeOutage
	// serving counts the requests in ServeHTTP: Cleanup gives the store
	// back once they are done (cleanup_drain.go). Made by Provision (a
	// pointer: the Caddyfile adapter copies an unprovisioned Handler).
	serving *atomic.Int64
	// capSet is the handler's entry in the admin API's registry.
	capSet *capset.CapSet
}

// CaddyModule returns the Caddy module information.
func (*Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "http.handlers.frequency_cap",
		New: func() caddy.Module { return new(Handler) },
	}
}

// fillDefaults sets the settings left empty to their defaults.
func (h *Handler) fillDefaults() {
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
}

// Provision fills in defaults, compiles the rules, takes the store from
// the pool, creates the handler's metrics, makes it known to the admin
// API by name, logs the store it uses and checks Redis (startup.go,
// bounded in time): a server that answers but refuses the login or a
// command the store needs fails the load; one that does not answer is
// logged, and on_error decides until it does.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	h.serving = new(atomic.Int64)
	h.fillDefaults()
	if err := h.provisionAnswer(); err != nil {
		return fmt.Errorf("frequency_cap %s: %w", h.Name, err)
	}
	for _, s := range h.RefundOn {
		m, err := parseStatusMatch(s)
		if err != nil {
			return err
		}
		h.refundOn = append(h.refundOn, m)
	}
	if err := h.compileAndWatch(); err != nil {
		return fmt.Errorf("frequency_cap %s: %w", h.Name, err)
	}
	h.warnMatchesEverything()

	var cfg *redisstore.Config
	h.timeout = redisstore.DefaultTimeout
	if h.Redis != nil {
		c, err := h.Redis.resolve(caddy.NewReplacer())
		if err == nil {
			err = c.Validate()
		}
		if err != nil {
			return fmt.Errorf("frequency_cap %s: %w", h.Name, err)
		}
		cfg = &c
		h.timeout = c.EffectiveTimeout()
	}
	if err := h.acquireStore(cfg); err != nil {
		return fmt.Errorf("frequency_cap %s: %w", h.Name, err)
	}
	if err := h.provisionMetrics(ctx); err != nil {
		return fmt.Errorf("frequency_cap %s: registering metrics: %w", h.Name, err)
	}
	reasons := newReasonCounters(h.Name)
	refusals := &refusalLog{logger: h.logger, handler: h.Name, onError: h.OnError, interval: refusalInterval}
	h.warns = &storeWarnings{logger: h.logger, handler: h.Name, onError: h.OnError, interval: warnInterval, reasons: reasons, refusals: refusals}
	h.locals = &storeWarnings{msg: "frequency cap store failing: deciding in the local store", logger: h.logger, handler: h.Name, onError: h.OnError, interval: warnInterval, reasons: reasons, refusals: refusals}
	h.outage = &storeOutage{logger: h.logger, handler: h.Name, interval: warnInterval, warnings: []*storeWarnings{h.warns, h.locals}}
	// One config's modules share its root context's cancellation: its
	// Done channel is the config's identity (each server wraps the
	// context with values of its own, which Done passes through).
	cs, err := h.register(ctx.Context.Done())
	if err != nil {
		return fmt.Errorf("frequency_cap %s: %w", h.Name, err)
	}
	h.capSet = cs
	if err := h.checkStoreAtStart(ctx, cfg); err != nil {
		return fmt.Errorf("frequency_cap %s: %w", h.Name, err)
	}
	return nil
}

// Validate checks the settings that compile does not.
func (h *Handler) Validate() error {
	if err := limiter.CheckName(h.Name); err != nil {
		return fmt.Errorf("frequency_cap: name %w", err)
	}
	if err := limiter.CheckPrefix(h.KeyPrefix); err != nil {
		return fmt.Errorf("frequency_cap %s: key_prefix %w", h.Name, err)
	}
	switch {
	case h.OnError != OnErrorAllow && h.OnError != OnErrorDeny && h.OnError != OnErrorLocal:
		return fmt.Errorf("frequency_cap %s: on_error must be allow, deny or local, not %q", h.Name, h.OnError)
	case h.OnError == OnErrorLocal && h.Redis == nil:
		return fmt.Errorf("frequency_cap %s: on_error local needs a redis store (the memory store never fails)", h.Name)
	case h.LocalDivisor < 0:
		return fmt.Errorf("frequency_cap %s: local_divisor must be at least 1, not %d", h.Name, h.LocalDivisor)
	case h.LocalDivisor != 0 && h.OnError != OnErrorLocal:
		return fmt.Errorf("frequency_cap %s: local_divisor needs on_error local", h.Name)
	}
	if h.OnMissing != OnMissingReject && h.OnMissing != OnMissingSkip {
		return fmt.Errorf("frequency_cap %s: on_missing must be reject or skip, not %q", h.Name, h.OnMissing)
	}
	if h.MaxBody < 0 || h.MaxBody > maxMaxBody {
		return fmt.Errorf("frequency_cap %s: max_body must be 1 byte to 1TiB, not %d", h.Name, h.MaxBody)
	}
	if h.StatusCode < 400 || h.StatusCode > 599 {
		return fmt.Errorf("frequency_cap %s: status_code %d is not a 4xx or 5xx status", h.Name, h.StatusCode)
	}
	if len(h.rules) == 0 {
		return fmt.Errorf("frequency_cap %s: no rules", h.Name)
	}
	return nil
}

// Cleanup leaves the admin API's registry, logs the store failures not yet
// reported and gives the store back to the pool; it is safe after a failed
// Provision.
func (h *Handler) Cleanup() error {
	capset.Unregister(h.capSet)
	h.capSet = nil
	h.outage.stop(time.Now())
	if h.warns != nil {
		h.warns.stop()
		h.locals.stop()
	}
	if h.serving != nil && h.serving.Load() > 0 {
		go h.releaseWhenServed(time.Now().Add(drainBound))
		return nil
	}
	return h.releaseStore()
}

// ServeHTTP implements caddyhttp.MiddlewareHandler.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, upstream caddyhttp.Handler) error {
	h.serving.Add(1)
	defer h.serving.Add(-1)
	r, passing := passedOn(r)
	defer passing.release()
	next := &passOn{next: upstream}
	repl := r.Context().Value(caddy.ReplacerCtxKey).(*caddy.Replacer)
	if h.lowers {
		repl.Map(lowerProvider(repl))
	}
	if fail := repeatedInRequest(r, h.queryParams, h.headerNames); fail != nil {
		undecided(repl)
		return h.fail(w, r, fail)
	}
	if h.readsPath {
		if fail := uncleanPath(r); fail != nil {
			undecided(repl)
			return h.fail(w, r, fail)
		}
	}
	if h.needs != 0 {
		b, fail := readBody(r, h.needs, h.MaxBody)
		if fail == nil && b.json != nil {
			fail = foldedName(b.json, h.jsonPaths)
		}
		if fail == nil && b.json != nil {
			fail = h.keyShapes(b.json)
		}
		if fail == nil && b.form != nil {
			fail = repeatedField(b.form, h.formFields)
		}
		if fail == nil && b.form != nil {
			fail = formFieldInQuery(r, b.form, h.formFields)
		}
		if fail != nil {
			undecided(repl)
			if fail.Status == http.StatusRequestEntityTooLarge && r.ProtoMajor == 1 {
				// Close rather than drain the rest: net/http would
				// otherwise read up to 256 KB of it before sending the
				// answer, which a client may be waiting for before it
				// sends more.
				w.Header().Set("Connection", "close")
			}
			return h.fail(w, r, fail)
		}
		repl.Map(b.provide)
		if h.skips(repl) {
			return next.ServeHTTP(w, r)
		}
		if h.batch != nil {
			return h.serveBatch(w, r, next, repl, b)
		}
	} else if h.skips(repl) {
		return next.ServeHTTP(w, r)
	}

	return h.serveOne(w, r, next, repl, false)
}

// serveOne decides the request as one send and passes it on or denies it.
// noEntries: it is a batch that found no entry, decided without what a
// batch reads per entry (see request).
func (h *Handler) serveOne(w http.ResponseWriter, r *http.Request, next *passOn, repl *caddy.Replacer, noEntries bool) error {
	req, quiet, fail := h.request(repl, noEntries)
	if fail != nil {
		undecided(repl)
		return h.fail(w, r, fail)
	}
	if len(req.Checks) == 0 && len(quiet) == 0 {
		undecided(repl)
		return next.ServeHTTP(w, r)
	}

	// A sender that hangs up while the store decides has its send decided
	// all the same (see passing): the store may have written it already.
	d, err := h.decide(r.Context(), req, quiet)
	if err != nil {
		h.metrics.countFailure(req)
		h.warns.add(opDecide, err)
		undecided(repl)
		if h.OnError == OnErrorDeny {
			return h.fail(w, r, storeDown)
		}
		return next.ServeHTTP(w, r)
	}

	h.metrics.countDecision(d, h.DryRun, req.Exempt)
	h.setPlaceholders(repl, d)
	setQuotaHeaders(w.Header(), d, stackQuota(r, d, d.Allowed || h.DryRun), h.style.ResetIsTime)
	h.logShadows(req, d)
	if !d.Allowed {
		h.logDenial(req, d)
		if !h.DryRun {
			return h.writeDenial(w, r, req, d)
		}
	}
	if !d.Recorded() || len(h.refundOn) == 0 {
		return next.ServeHTTP(w, r)
	}
	var body *streamedBody
	if h.needs == 0 && r.Body != nil && r.Body != http.NoBody {
		body = &streamedBody{ReadCloser: r.Body}
		r.Body = body
	}
	return h.serveRefundable(w, r, next, d, body)
}

// streamedBody is a request body passed on unread, so that a body that
// breaks off on its way (the client hangs up or stalls, or a body limit
// cuts it) is told from an upstream that gave no answer: the proxy fails
// either way, but the upstream may have acted on a body that broke off
// (an API that answers on its headers, or decodes one JSON value and
// reads no further, as gin's binding does), so that send stays counted.
type streamedBody struct {
	io.ReadCloser
	// brokeOff is set by the reader, which may be another goroutine
	// (the proxy's transport).
	brokeOff atomic.Bool
}

func (b *streamedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.brokeOff.Store(true)
	}
	return n, err
}

// skips reports whether the request is one Skip passes on undecided, and
// counts it so.
func (h *Handler) skips(repl *caddy.Replacer) bool {
	if h.skip == nil || !h.skip[repl.ReplaceAll(h.Skip.Placeholder, "")] {
		return false
	}
	undecided(repl)
	h.metrics.skipped.Inc()
	return true
}

// request resolves the dimensions, costs, limits and zones of every rule
// that applies to the request, and whether it is exempt. The quiet rules
// that apply are not checks for the store: they come back apart, each with
// whether the request falls in its range. For a batch that found no entry
// (noEntries), the dimensions and the rules' costs, limits and zones that
// a batch reads per entry are absent (perEntry): such a dimension is
// missing, unread, and neither counted nor refused here (serveBatch did),
// and such a rule is left out.
func (h *Handler) request(repl *caddy.Replacer, noEntries bool) (*limiter.Request, []quietHit, *reply.Failure) {
	values := make([]string, len(h.dims))
	for i, d := range h.dims {
		if noEntries && h.batch.perEntryDim(i) {
			continue
		}
		values[i] = h.unframed(i, repl.ReplaceAll(d.Expr, ""))
		if h.keying[i] {
			if f := withNUL(d.Name, "", values[i]); f != nil {
				return nil, nil, f
			}
		}
		if values[i] != "" {
			h.watch.found(i)
			continue
		}
		h.metrics.missing[i].Inc()
		if h.rejectsMissing(i) {
			return nil, nil, &reply.Failure{Status: http.StatusBadRequest, Reason: "missing value for dimension " + d.Name, Dimension: d.Name}
		}
	}
	// Counted once its limit and zone placeholders are read (below): the
	// check this request may make sees its reads too.
	defer h.watch.request(time.Now())
	req := &limiter.Request{Checks: make([]limiter.Check, 0, len(h.rules))}
	if h.exempt != nil {
		req.Exempt = h.exempt[repl.ReplaceAll(h.Exempt.Placeholder, "")]
	}
	var quiet []quietHit
rules:
	for i := range h.rules {
		cr := &h.rules[i]
		if noEntries && h.batch.perEntryRule(i) {
			continue
		}
		c := limiter.Check{Rule: cr.rule, Values: make([]string, len(cr.dims)), Cost: cr.cost, Shadow: cr.shadow}
		for j, di := range cr.dims {
			if values[di] == "" {
				continue rules
			}
			c.Values[j] = values[di]
		}
		if cr.zoneExpr != "" {
			c.Zone = zones.OfRequest(repl.ReplaceAll(cr.zoneExpr, ""))
			h.watch.readFallback(cr.zoneWatch, c.Zone != nil)
		}
		if q := cr.rule.Quiet; q != nil {
			if until, in := q.Until(time.Now(), c.Zone); in {
				quiet = append(quiet, quietHit{check: c, until: until})
			}
			continue
		}
		var fail *reply.Failure
		if cr.costExpr != "" {
			if c.Cost, fail = cr.costOf(repl.ReplaceAll(cr.costExpr, ""), ""); fail != nil {
				return nil, nil, fail
			}
		}
		if cr.limitExpr != "" {
			var given bool
			if c.Limit, given, fail = cr.limitOf(repl.ReplaceAll(cr.limitExpr, ""), ""); fail != nil {
				return nil, nil, fail
			}
			h.watch.readFallback(cr.limitWatch, given)
		}
		req.Checks = append(req.Checks, c)
	}
	return req, quiet, nil
}

// serveRefundable passes an admitted request (d) on and refunds it, once, when
// its response status matches refund_on, or it gets no response while its
// streamed body (nil when there is none) went whole: a sender cannot pass
// a cap by cutting a body off after the upstream had what it acts on.
func (h *Handler) serveRefundable(w http.ResponseWriter, r *http.Request, next *passOn, d *limiter.Decision, body *streamedBody) error {
	rec := newStatusRecorder(w, h.refunds)
	defer h.refundIfAborted(next, func() int { return rec.status }, func() { h.refund(r, d.ID()) })
	err := next.ServeHTTP(rec, r)
	status := rec.status
	if status == 0 && err == nil {
		status = http.StatusOK
	}
	// An answer whose status went out is given back by its status alone.
	noAnswer := err != nil && rec.status == 0 && (body == nil || !body.brokeOff.Load())
	if noAnswer {
		// Caddy answers the error (a 502) on w, its quota fields still
		// on: none came from an upstream.
		dropOwnQuota(w.Header(), rec.own)
	}
	if (noAnswer || matchesAny(h.refundOn, status)) && !next.cut {
		h.refund(r, d.ID())
	}
	return err
}

// refunds reports whether an upstream's answer of this status is refunded.
func (h *Handler) refunds(status int) bool { return matchesAny(h.refundOn, status) }

// refund gives an admission back.
func (h *Handler) refund(r *http.Request, id string) { h.refundCounting(r, id, 1) }

// refundCounting gives back what id names, admissions admissions (a joined
// id names several), counted as such in the metrics when given.
func (h *Handler) refundCounting(r *http.Request, id string, admissions int) {
	if h.giveBack(r, id) {
		h.metrics.refunds.Add(float64(admissions))
	}
}

// giveBack gives back the admissions of id, timed as a refund, and
// reports whether the store gave them back.
func (h *Handler) giveBack(r *http.Request, id string) bool {
	// The client may be gone; the refund is still owed.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), h.timeout)
	start := time.Now()
	given, err := h.store.Refund(ctx, id)
	cancel()
	h.metrics.refund.observe(start, err)
	if err != nil {
		h.warns.add(opRefund, err)
	}
	return given && err == nil
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

// undecided sets the placeholders when no decision was made (a rejected
// request, no rule applied, the store failed), so that a route reading them
// gets values, not the placeholder text: no rule, no wait, and an unknown
// remaining quota, which is empty text in a header and null in a JSON log
// (where a decided one is a number).
func undecided(repl *caddy.Replacer) {
	repl.Set("http.frequency_cap.rule", "")
	repl.Set("http.frequency_cap.retry_after", int64(0))
	repl.Set("http.frequency_cap.remaining", nil)
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
	_ caddyfile.Unmarshaler       = (*Handler)(nil)
)
