package caddymodule

import (
	"errors"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// The outcome label of caddy_frequency_cap_decisions_total. A decision
// counts once for each rule it applied:
//
//	allowed       the request was admitted, and the rule counted it
//	denied        the rule refused the request (a request refused by two
//	              rules counts once for each); a rule that would have
//	              admitted a refused request counts nothing
//	dry_run_deny  as denied, under dry_run, where the request passed anyway
//	error         the store failed or timed out, so the rule decided nothing
//	              (whatever on_error then did with the request)
//	exempt        the request was exempt: admitted whatever the rule said,
//	              and counted
//	quiet         a quiet rule refused the request: its range held it (a
//	              quiet rule counts only then, so a denial ratio of
//	              denied over allowed and denied leaves it out, where it
//	              would read 100 % every night)
//
// A shadow rule (dry_run in its block) that would deny a request the live
// rules admitted counts as dry_run_deny; one the live rules refused, it
// counts nothing for. Rules left out of a request
// (on_missing skip) count nothing. Each recipient entry of a batch is a
// decision of its own; the entries a refused batch admitted recorded
// nothing and count nothing.
const (
	outcomeAllowed    = "allowed"
	outcomeDenied     = "denied"
	outcomeDryRunDeny = "dry_run_deny"
	outcomeError      = "error"
	outcomeExempt     = "exempt"
	outcomeQuiet      = "quiet"
)

// The store label of caddy_frequency_cap_decisions_by_store_total: the
// store that made a decision. local is on_error local's store, deciding
// while Redis fails.
const (
	storeRedis  = "redis"
	storeMemory = "memory"
	storeLocal  = "local"
)

// The op label of the store series.
const (
	opDecide = "decide"
	opRefund = "refund"
	opUsage  = "usage"
	opReset  = "reset"
)

// metrics are the collectors of every handler in the process. They are
// made once, so that counts survive config reloads, and registered in the
// registry of each config's context, which the admin endpoint serves at
// /metrics. No label carries a dimension value: the series count depends
// on the configuration, never on the traffic.
var metrics struct {
	once          sync.Once
	decisions     *prometheus.CounterVec
	storeDuration *prometheus.HistogramVec
	storeErrors   *prometheus.CounterVec
	refunds       *prometheus.CounterVec
	resets        *prometheus.CounterVec
	skipped       *prometheus.CounterVec
	missing       *prometheus.CounterVec
	byStore       *prometheus.CounterVec
	// The batch series exist only for handlers with a batch dimension.
	batchEntries   *prometheus.HistogramVec
	batchDropped   *prometheus.CounterVec
	spliceFailures *prometheus.CounterVec
}

func initMetrics() {
	const ns, sub = "caddy", "frequency_cap"
	metrics.once.Do(func() {
		metrics.decisions = prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "decisions_total",
			Help: "Frequency cap decisions, once per applied rule, by handler name, rule and outcome (allowed, denied, dry_run_deny, error, exempt, quiet: a quiet rule's refusal).",
		}, []string{"handler", "rule", "outcome"})
		metrics.storeDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "store_duration_seconds",
			Help:    "Time spent in frequency cap store calls, by handler name and operation (decide, refund, usage, reset).",
			Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1},
		}, []string{"handler", "op"})
		metrics.storeErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "store_errors_total",
			Help: "Frequency cap store calls that failed or timed out, by handler name and operation.",
		}, []string{"handler", "op"})
		metrics.refunds = prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "refunds_total",
			Help: "Admitted sends whose quota was given back (refund_on), by handler name: a single send's request, or each entry of a batch send.",
		}, []string{"handler"})
		metrics.resets = prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "resets_total",
			Help: "Usage resets (caps lifted by hand), by handler name and source: admin (the admin API) or console.",
		}, []string{"handler", "source"})
		metrics.skipped = prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "skipped_total",
			Help: "Requests passed on without a decision (skip: a validation request the provider delivers nothing of), by handler name.",
		}, []string{"handler"})
		metrics.missing = prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "missing_dimensions_total",
			Help: "Requests in which a dimension had no value, by handler name and dimension name.",
		}, []string{"handler", "dimension"})
		metrics.byStore = prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "decisions_by_store_total",
			Help: "Frequency cap decisions (once per request) by handler name and the store that made them (redis, memory, or local: on_error local while Redis fails).",
		}, []string{"handler", "store"})
		metrics.batchEntries = prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: ns, Subsystem: sub, Name: "batch_entries",
			Help:    "Recipient entries per batch request (a body read through a wildcard dimension), by handler name.",
			Buckets: []float64{1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 5000},
		}, []string{"handler"})
		metrics.batchDropped = prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "batch_dropped_total",
			Help: "Denied recipient entries removed from batch requests that were passed on (batch drop), by handler name.",
		}, []string{"handler"})
		metrics.spliceFailures = prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: ns, Subsystem: sub, Name: "splice_failures_total",
			Help: "Upstream answers to batches with dropped entries that splice could not rewrite (not 2xx, not JSON, no data array of the expected length) and were passed on unchanged, by handler name.",
		}, []string{"handler"})
	})
}

// registerMetrics adds the collectors to a config's registry; a second
// handler of the same config finds them there already.
func registerMetrics(reg *prometheus.Registry) error {
	initMetrics()
	if reg == nil {
		return nil
	}
	for _, c := range []prometheus.Collector{metrics.decisions, metrics.storeDuration, metrics.storeErrors, storeReasonsVec(), metrics.refunds, metrics.resets, metrics.skipped, metrics.missing, metrics.byStore, metrics.batchEntries, metrics.batchDropped, metrics.spliceFailures, writePaths} {
		if err := reg.Register(c); err != nil {
			var dup prometheus.AlreadyRegisteredError
			if !errors.As(err, &dup) {
				return err
			}
		}
	}
	return nil
}

// handlerMetrics are one handler's series, looked up once at Provision so
// that the request path does no label hashing.
type handlerMetrics struct {
	rules   map[*limiter.Rule]*ruleMetrics
	missing []prometheus.Counter // by index into Handler.dims
	decide  storeOp
	refund  storeOp
	// usage times a request's usage read where a quiet rule refused it
	// (the answer's other rules), as the admin API's reads are.
	usage   storeOp
	refunds prometheus.Counter
	skipped prometheus.Counter
	// byStore counts the decisions of the handler's store, byLocal those of
	// on_error local's store.
	byStore, byLocal prometheus.Counter
	// The batch series; nil without a batch dimension.
	batchEntries                 prometheus.Observer
	batchDropped, spliceFailures prometheus.Counter
}

type ruleMetrics struct {
	allowed, denied, dryRunDeny, failed, exempt prometheus.Counter
	// quiet is a quiet rule's refusals; nil for the other rules.
	quiet prometheus.Counter
}

// storeOp is the latency and error series of one store operation.
type storeOp struct {
	duration prometheus.Observer
	errors   prometheus.Counter
}

func newStoreOp(handler, op string) storeOp {
	return storeOp{
		duration: metrics.storeDuration.WithLabelValues(handler, op),
		errors:   metrics.storeErrors.WithLabelValues(handler, op),
	}
}

// observe records one call that started at start and ended with err.
func (o storeOp) observe(start time.Time, err error) {
	o.duration.Observe(time.Since(start).Seconds())
	if err != nil {
		o.errors.Inc()
	}
}

// provisionMetrics registers the collectors in ctx's registry and creates
// the handler's series, so that they read 0 before anything happens.
func (h *Handler) provisionMetrics(ctx caddy.Context) error {
	if err := registerMetrics(ctx.GetMetricsRegistry()); err != nil {
		return err
	}
	m := &handlerMetrics{
		rules:   make(map[*limiter.Rule]*ruleMetrics, len(h.rules)),
		decide:  newStoreOp(h.Name, opDecide),
		refund:  newStoreOp(h.Name, opRefund),
		usage:   newStoreOp(h.Name, opUsage),
		refunds: metrics.refunds.WithLabelValues(h.Name),
		skipped: metrics.skipped.WithLabelValues(h.Name),
		byStore: metrics.byStore.WithLabelValues(h.Name, storeMemory),
	}
	for _, source := range []string{"admin", "console"} {
		metrics.resets.WithLabelValues(h.Name, source)
	}
	if h.Redis != nil {
		m.byStore = metrics.byStore.WithLabelValues(h.Name, storeRedis)
	}
	if h.OnError == OnErrorLocal {
		m.byLocal = metrics.byStore.WithLabelValues(h.Name, storeLocal)
	}
	for _, cr := range h.rules {
		m.rules[cr.rule] = &ruleMetrics{
			allowed:    metrics.decisions.WithLabelValues(h.Name, cr.rule.Name, outcomeAllowed),
			denied:     metrics.decisions.WithLabelValues(h.Name, cr.rule.Name, outcomeDenied),
			dryRunDeny: metrics.decisions.WithLabelValues(h.Name, cr.rule.Name, outcomeDryRunDeny),
			failed:     metrics.decisions.WithLabelValues(h.Name, cr.rule.Name, outcomeError),
			exempt:     metrics.decisions.WithLabelValues(h.Name, cr.rule.Name, outcomeExempt),
		}
		if cr.rule.Quiet != nil {
			m.rules[cr.rule].quiet = metrics.decisions.WithLabelValues(h.Name, cr.rule.Name, outcomeQuiet)
		}
	}
	for _, d := range h.dims {
		m.missing = append(m.missing, metrics.missing.WithLabelValues(h.Name, d.Name))
	}
	if h.batch != nil {
		m.batchEntries = metrics.batchEntries.WithLabelValues(h.Name)
		m.batchDropped = metrics.batchDropped.WithLabelValues(h.Name)
		m.spliceFailures = metrics.spliceFailures.WithLabelValues(h.Name)
	}
	h.metrics = m
	return nil
}

// countDecision counts a decision once for each rule it applied (see the
// outcome constants).
func (m *handlerMetrics) countDecision(d *limiter.Decision, dryRun, exempt bool) {
	for i := range d.Results {
		res := &d.Results[i]
		if o := outcomeOf(res, d.Allowed, dryRun, exempt); o != noOutcome {
			m.rules[res.Rule].counter(o).Inc()
		}
	}
}

// The outcomes countDecision counts, as indices (see outcomeOf).
const (
	noOutcome = iota
	allowedOutcome
	deniedOutcome
	dryRunDenyOutcome
	exemptOutcome
	quietOutcome
	outcomes
)

// outcomeOf is what a rule's result counts as, in a decision that
// admitted the request or not: one of the outcome constants, or nothing.
func outcomeOf(res *limiter.Result, allowed, dryRun, exempt bool) int {
	switch {
	case exempt:
		return exemptOutcome
	case res.Waived && res.Denied && allowed:
		return dryRunDenyOutcome
	case res.Waived && res.Denied:
		// A shadow rule's would-be denial of a request the live rules
		// refused stops nothing that was not stopped: the series counts
		// the sends the rule would stop once live.
		return noOutcome
	case allowed:
		return allowedOutcome
	case res.Denied && dryRun:
		return dryRunDenyOutcome
	case res.Denied && res.Rule.Quiet != nil:
		return quietOutcome
	case res.Denied:
		return deniedOutcome
	}
	return noOutcome
}

// counter is the rule's series of outcome o (not noOutcome).
func (rm *ruleMetrics) counter(o int) prometheus.Counter {
	switch o {
	case allowedOutcome:
		return rm.allowed
	case deniedOutcome:
		return rm.denied
	case dryRunDenyOutcome:
		return rm.dryRunDeny
	case quietOutcome:
		return rm.quiet
	}
	return rm.exempt
}

// countFailure counts a decision the store could not make.
func (m *handlerMetrics) countFailure(req *limiter.Request) {
	for i := range req.Checks {
		m.rules[req.Checks[i].Rule].failed.Inc()
	}
}
