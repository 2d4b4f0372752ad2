// Package capset is what the support surfaces read of a frequency_cap
// handler: a snapshot of its rules, dimensions and store taken at
// Provision (CapSet), and the registry where provisioned handlers are
// found by name. The handler registers; the console and the admin API
// (caddymodule/support) look up. Neither imports the other: this package
// is the whole of what passes between them.
package capset

import (
	"sort"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// Dimension is a declared dimension that some rule uses: its name and
// the placeholder expression that reads it from a request. A Constant
// one is the dimension of rules without `by` (one count over every
// send): Expr is its value, the same for every request, which support
// fills in rather than asks for.
type Dimension struct {
	Name     string
	Expr     string
	Constant bool
}

// CapSet is what the admin API and the console need of a provisioned
// handler, copied at Provision so that a request to either never reads a
// handler that is being cleaned up.
type CapSet struct {
	Name       string
	Dimensions map[string]string // the handler's dimensions, as configured
	Dims       []Dimension       // those its rules use, in the order they first appear
	Rules      []Rule
	Store      limiter.Store
	StoreKind  string // "memory" or "redis"
	DryRun     bool
	Exempt     *Exempt // nil when no request is exempt
	Timeout    time.Duration
	LogValues  bool // whether the handler may log dimension values
	Logger     *zap.Logger
	// ObserveUsage and ObserveReset record one store call of a usage
	// read or a reset in the handler's store metrics; CountReset counts
	// a reset by where it came from.
	ObserveUsage, ObserveReset func(start time.Time, err error)
	CountReset                 func(source string)
	// Missing lists the dimensions no request had a value for in the
	// last minute (or the first 100 requests), under on_missing skip.
	Missing func() []string
}

// Rule is what support reads of a rule: its engine rule, its
// dimensions (indices into CapSet.Dims, in the order of Rule.By), the
// placeholders its zone, limit and cost are read from ("" when fixed),
// the fallback of a placeholder limit (0 for none), and whether it is a
// shadow rule. Each placeholder is a value its answers depend on beyond
// the dimensions, which support must ask for or say it assumed.
type Rule struct {
	Rule          *limiter.Rule
	Dims          []int
	ZoneExpr      string
	LimitExpr     string
	LimitFallback int64
	CostExpr      string
	Shadow        bool
}

// FallbackZone is the zone a rule whose zone is a placeholder counts in
// when a request names none (or one unknown).
func (r *Rule) FallbackZone() *time.Location {
	z := r.Rule.Window.Zone
	if q := r.Rule.Quiet; q != nil {
		z = q.Zone
	}
	if z == nil {
		return time.UTC
	}
	return z
}

// Exempt is a handler's exempt subdirective, as the console lists it.
type Exempt struct {
	Placeholder string   `json:"placeholder"`
	Values      []string `json:"values"`
}

// capSets holds the provisioned handlers by name, in the order they were
// provisioned. A config reload provisions the new handlers before it
// cleans up the old ones, so for a while both are here; each Cleanup
// removes its own entry only, and lookups take the newest.
var capSets = struct {
	sync.RWMutex
	byName map[string][]*CapSet
}{byName: make(map[string][]*CapSet)}

// Register makes cs findable by its name, until Unregister.
func Register(cs *CapSet) {
	capSets.Lock()
	capSets.byName[cs.Name] = append(capSets.byName[cs.Name], cs)
	capSets.Unlock()
}

// Unregister removes one entry; harmless when it is nil or already gone.
func Unregister(cs *CapSet) {
	if cs == nil {
		return
	}
	capSets.Lock()
	defer capSets.Unlock()
	list := capSets.byName[cs.Name]
	for i, e := range list {
		if e == cs {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(capSets.byName, cs.Name)
	} else {
		capSets.byName[cs.Name] = list
	}
}

// Lookup returns the newest handler provisioned under name, or nil.
// Handlers that share a name should share their rules (one cap set used in
// several routes); if they do not, the admin API answers for the one
// loaded last.
func Lookup(name string) *CapSet {
	capSets.RLock()
	defer capSets.RUnlock()
	list := capSets.byName[name]
	if len(list) == 0 {
		return nil
	}
	return list[len(list)-1]
}

// List returns the newest handler under each name, by name.
func List() []*CapSet {
	capSets.RLock()
	defer capSets.RUnlock()
	out := make([]*CapSet, 0, len(capSets.byName))
	for _, list := range capSets.byName {
		out = append(out, list[len(list)-1])
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
