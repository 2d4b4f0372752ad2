package caddymodule

import (
	"encoding/json"
	"errors"

	"go.uber.org/zap"

	"github.com/freqcap/caddy-freqcap/caddymodule/internal/capset"
)

// register makes the handler findable by name and returns its entry for
// unregister. load is the config's identity (its root context's Done
// channel, one per config loaded): two cap sets of one config with one
// name and different settings are an error.
func (h *Handler) register(load any) (*capset.CapSet, error) {
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
		cs.Rules[i] = capset.Rule{Rule: cr.rule, Dims: cr.dims, ZoneExpr: cr.zoneExpr, LimitExpr: cr.limitExpr, LimitFallback: cr.limitFallback, CostExpr: cr.costExpr, Cost: cr.cost, Shadow: cr.shadow}
	}
	if h.Exempt != nil {
		cs.Exempt = &capset.Exempt{Placeholder: h.Exempt.Placeholder, Values: h.Exempt.Values}
	}
	if h.Redis != nil {
		cs.StoreKind = "redis"
	}
	// The exported fields are the settings as configured (and
	// defaulted): the same cap set used in two routes has the same.
	signature, err := json.Marshal(h)
	if err != nil {
		return nil, err
	}
	switch err := capset.Register(cs, load, string(signature), h.Name != DefaultName); {
	case errors.Is(err, capset.ErrSameName):
		h.logger.Warn("several frequency_cap cap sets without a name, with other settings: the admin API and the console cannot tell them apart (they answer 409 for "+DefaultName+"), nor can the metrics, and on one store and key_prefix the rules of each that start with the same dimension count the other's sends; give each a name, and each a key_prefix unless sharing counts is meant", zap.String("name", h.Name))
	case err != nil:
		return nil, err
	}
	return cs, nil
}
