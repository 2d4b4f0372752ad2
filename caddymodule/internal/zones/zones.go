// Package zones loads the IANA zones that a configuration, a request or
// a support query names: Load refuses an unknown name with a reason;
// OfRequest caches what requests name.
package zones

import (
	"fmt"
	"strings"
	"sync"
	"time"

	// Zones must resolve the same on hosts without a zoneinfo database
	// (scratch and distroless images).
	_ "time/tzdata"
)

// Load loads an IANA zone named in the configuration. "Local" is
// refused: a cap's day must not depend on the host it runs on. So are
// the names only a host's zoneinfo directory has (hostOnly). A name is
// loaded once, requests' and configurations' alike: each reload would
// otherwise bring new zones, and what is kept per zone (the engine's
// period bounds) with them.
func Load(name string) (*time.Location, error) {
	if z := OfRequest(name); z != nil {
		return z, nil
	}
	return nil, unknown(name)
}

// hostOnly reports whether name is a file of a host's zoneinfo
// directory that is no IANA zone, and that the zone database embedded in
// the gateway (time/tzdata) lacks: "localtime" (Debian's link to the
// host's /etc/localtime), "posixrules", and the "posix/" and "right/"
// trees ("right/" zones count leap seconds). Taken from the host, they
// would give two gateways on one store two days for one recipient.
func hostOnly(name string) bool {
	return name == "localtime" || name == "posixrules" || strings.HasPrefix(name, "posix/") || strings.HasPrefix(name, "right/")
}

// unknown is the error for a name that is no zone, quoting at most its
// first 64 bytes: the answer need not echo a sender's 40 KB back.
func unknown(name string) error {
	if len(name) > 64 {
		name = strings.ToValidUTF8(name[:64], "") + "..."
	}
	return fmt.Errorf("unknown zone %q (name an IANA zone such as Asia/Shanghai)", name)
}

// canonical reports whether name is spelled as the zone database spells
// its names: segments of letters, digits, '_', '+' and '-', joined by
// single slashes. time.LoadLocation also accepts "America/./New_York"
// and "America//New_York"; were every spelling of a zone kept in the
// cache, a sender could grow it without bound.
func canonical(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, seg := range strings.Split(name, "/") {
		if seg == "" || seg == "." || seg == ".." {
			return false
		}
		for i := 0; i < len(seg); i++ {
			c := seg[i]
			if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '+' || c == '-') {
				return false
			}
		}
	}
	return true
}

// zoneCache remembers the zones requests have named. Only canonical names
// that load are kept, so the cache is bounded by the zone database; an unknown name
// costs a lookup each time (tens of microseconds), which is rare for a
// single send; a batch looks each name up once (batchZones).
var zoneCache sync.Map // string → *time.Location

// OfRequest returns the zone a request names, or nil when the name is
// empty or unknown (the rule's fallback zone then applies).
func OfRequest(name string) *time.Location {
	if z, ok := zoneCache.Load(name); ok {
		return z.(*time.Location)
	}
	if name == "Local" || !canonical(name) || hostOnly(name) {
		return nil
	}
	z, err := time.LoadLocation(name)
	if err != nil {
		return nil
	}
	// Two first loads of a name keep one zone.
	got, _ := zoneCache.LoadOrStore(name, z)
	return got.(*time.Location)
}
