// Package capset is what the support surfaces read of a frequency_cap
// handler: a snapshot of its rules, dimensions and store taken at
// Provision (CapSet), and the registry where provisioned handlers are
// found by name. The handler registers; the console and the admin API
// (caddymodule/support) look up. Neither imports the other: this package
// is the whole of what passes between them.
package capset

import (
	"errors"
	"fmt"
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
	// Keying is set when some rule keys its records by it (its first
	// dimension): the gateway trims its values (jsonbatch.TrimKey), and
	// so must a lookup.
	Keying bool
	// Lookup, when set, turns a trimmed value given to the admin API or
	// the console into the one the gateway counts under, for dimensions
	// read by a reader that rewrites what it reads ({email.*}: the
	// mailbox in lower case; {fcm_topic.*}: the topic without /topics/).
	// An error is the 400 of a value the gateway would refuse.
	Lookup func(string) (string, error)
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

	// load and signature are what Register compares cap sets of one
	// name by.
	load      any
	signature string
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
	// Cost is the constant cost of a rule without CostExpr (1 unless
	// configured): what a send takes, for an answer of whether one fits.
	Cost   int64
	Shadow bool
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

// ErrSameName is Register's answer when cs was registered beside a cap
// set of the same config and name with other settings, where the name
// was not chosen (the default): the caller warns, and Lookup refuses the
// name until the config changes.
var ErrSameName = errors.New("another frequency_cap in this config has the same name with other settings")

// Register makes cs findable by its name, until Unregister. Of cap sets
// loaded with the same config (load, the config's identity) under one
// name, the same settings (signature) are one cap set used in several
// routes; other settings are two cap sets that the admin API, the console
// and the metrics, which tell cap sets apart by name, would confuse. A
// chosen name (named) is then refused with an error; the default name is
// registered, answered ErrSameName, and looked up as ambiguous. A
// reload's new config (another load) replaces the old one's.
func Register(cs *CapSet, load any, signature string, named bool) error {
	capSets.Lock()
	defer capSets.Unlock()
	var err error
	for _, e := range capSets.byName[cs.Name] {
		if load != nil && e.load == load && e.signature != signature {
			if named {
				return fmt.Errorf("another frequency_cap in this config is named %s with other settings; give each cap set a name of its own (metrics, the admin API and the console tell them apart by it)", cs.Name)
			}
			err = ErrSameName
		}
	}
	cs.load, cs.signature = load, signature
	capSets.byName[cs.Name] = append(capSets.byName[cs.Name], cs)
	return err
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
// During a reload, the new config's is the newest. When that config
// holds cap sets of other settings under the name (unnamed ones, all
// "default"), it answers ErrSameName rather than pick one.
func Lookup(name string) (*CapSet, error) {
	capSets.RLock()
	defer capSets.RUnlock()
	list := capSets.byName[name]
	if len(list) == 0 {
		return nil, nil
	}
	newest := list[len(list)-1]
	for _, e := range list {
		if newest.load != nil && e.load == newest.load && e.signature != newest.signature {
			return nil, ErrSameName
		}
	}
	return newest, nil
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
