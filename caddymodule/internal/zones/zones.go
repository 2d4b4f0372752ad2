// Package zones loads the IANA zones that a configuration, a request or
// a support query names: Load refuses an unknown name with a reason;
// OfRequest caches what requests name.
package zones

import (
	"fmt"
	"sync"
	"time"

	// Zones must resolve the same on hosts without a zoneinfo database
	// (scratch and distroless images).
	_ "time/tzdata"
)

// Load loads an IANA zone named in the configuration. "Local" is
// refused: a cap's day must not depend on the host it runs on.
func Load(name string) (*time.Location, error) {
	if name == "Local" {
		return nil, fmt.Errorf("unknown zone %q (name an IANA zone such as Asia/Shanghai)", name)
	}
	z, err := time.LoadLocation(name)
	if err != nil {
		return nil, fmt.Errorf("unknown zone %q (name an IANA zone such as Asia/Shanghai)", name)
	}
	return z, nil
}

// zoneCache remembers the zones requests have named. Only names that load
// are kept, so the cache is bounded by the zone database; an unknown name
// costs a lookup each time (tens of microseconds), which is rare for a
// single send; a batch looks each name up once (batchZones).
var zoneCache sync.Map // string → *time.Location

// OfRequest returns the zone a request names, or nil when the name is
// empty or unknown (the rule's fallback zone then applies).
func OfRequest(name string) *time.Location {
	if name == "" || name == "Local" || len(name) > 64 {
		return nil
	}
	if z, ok := zoneCache.Load(name); ok {
		return z.(*time.Location)
	}
	z, err := time.LoadLocation(name)
	if err != nil {
		return nil
	}
	zoneCache.Store(name, z)
	return z
}
