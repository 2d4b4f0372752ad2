package caddymodule

import (
	"github.com/freqcap/caddy-freqcap/caddymodule/internal/capset"
)

// register makes the handler findable by name and returns its entry for
// unregister.
func (h *Handler) register() *capset.CapSet {
	usage, reset := newStoreOp(h.Name, opUsage), newStoreOp(h.Name, opReset)
	cs := &capset.CapSet{
		Name:         h.Name,
		Dimensions:   h.declaredDims(),
		Dims:         h.dims,
		Rules:        make([]capset.Rule, len(h.rules)),
		Store:        h.store,
		StoreKind:    "memory",
		DryRun:       h.DryRun,
		Timeout:      h.timeout,
		LogValues:    h.LogValues,
		Logger:       h.logger,
		ObserveUsage: usage.observe,
		ObserveReset: reset.observe,
		CountReset:   func(source string) { metrics.resets.WithLabelValues(h.Name, source).Inc() },
		Missing:      h.watch.Missing,
	}
	for i, cr := range h.rules {
		cs.Rules[i] = capset.Rule{Rule: cr.rule, Dims: cr.dims, ZoneExpr: cr.zoneExpr, LimitExpr: cr.limitExpr, LimitFallback: cr.limitFallback, CostExpr: cr.costExpr, Shadow: cr.shadow}
	}
	if h.Exempt != nil {
		cs.Exempt = &capset.Exempt{Placeholder: h.Exempt.Placeholder, Values: h.Exempt.Values}
	}
	if h.Redis != nil {
		cs.StoreKind = "redis"
	}
	capset.Register(cs)
	return cs
}
