package caddymodule

import (
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// capSet is what the admin API and the console need of a provisioned
// handler, copied at Provision so that a request to either never reads a
// handler that is being cleaned up.
type capSet struct {
	name       string
	dimensions map[string]string
	dims       []dimension
	rules      []compiledRule
	store      limiter.Store
	storeKind  string // "memory" or "redis"
	dryRun     bool
	exempt     *ExemptConfig
	timeout    time.Duration
	logValues  bool
	logger     *zap.Logger
}

// capSets holds the provisioned handlers by name, in the order they were
// provisioned. A config reload provisions the new handlers before it
// cleans up the old ones, so for a while both are here; each Cleanup
// removes its own entry only, and lookups take the newest.
var capSets = struct {
	sync.RWMutex
	byName map[string][]*capSet
}{byName: make(map[string][]*capSet)}

// register makes the handler findable by name and returns its entry for
// unregister.
func (h *Handler) register() *capSet {
	cs := &capSet{
		name:       h.Name,
		dimensions: h.Dimensions,
		dims:       h.dims,
		rules:      h.rules,
		store:      h.store,
		storeKind:  "memory",
		dryRun:     h.DryRun,
		exempt:     h.Exempt,
		timeout:    h.timeout,
		logValues:  h.LogValues,
		logger:     h.logger,
	}
	if h.Redis != nil {
		cs.storeKind = "redis"
	}
	capSets.Lock()
	capSets.byName[cs.name] = append(capSets.byName[cs.name], cs)
	capSets.Unlock()
	return cs
}

// unregister removes one entry; harmless when it is nil or already gone.
func unregister(cs *capSet) {
	if cs == nil {
		return
	}
	capSets.Lock()
	defer capSets.Unlock()
	list := capSets.byName[cs.name]
	for i, e := range list {
		if e == cs {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(capSets.byName, cs.name)
	} else {
		capSets.byName[cs.name] = list
	}
}

// lookupCapSet returns the newest handler provisioned under name, or nil.
// Handlers that share a name should share their rules (one cap set used in
// several routes); if they do not, the admin API answers for the one
// loaded last.
func lookupCapSet(name string) *capSet {
	capSets.RLock()
	defer capSets.RUnlock()
	list := capSets.byName[name]
	if len(list) == 0 {
		return nil
	}
	return list[len(list)-1]
}

// listCapSets returns the newest handler under each name, by name.
func listCapSets() []*capSet {
	capSets.RLock()
	defer capSets.RUnlock()
	out := make([]*capSet, 0, len(capSets.byName))
	for _, list := range capSets.byName {
		out = append(out, list[len(list)-1])
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}
