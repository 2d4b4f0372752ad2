package support

import (
	"fmt"
	"net/http"
	"strings"

	"go.uber.org/zap"

	"github.com/freqcap/caddy-freqcap/caddymodule/internal/capset"
	"github.com/freqcap/caddy-freqcap/caddymodule/internal/reply"
)

// A console's cap_sets may name a cap set the config does not have (a
// typo: pussh). The cap sets are looked up on every request (they may be
// provisioned after the console), so the names are checked there: the
// first list that finds one missing logs it, and a cap set that exists
// but is not listed is told so, not called unknown.

// warnUnknownCapSets logs, once a console, the names of cap_sets that no
// running cap set has: the console shows nothing of them.
func (c *Console) warnUnknownCapSets() {
	if c.warnedUnknown == nil || c.warnedUnknown.Load() {
		return
	}
	var unknown []string
	for _, name := range c.CapSets {
		if cs, err := capset.Lookup(name); cs == nil && err == nil {
			unknown = append(unknown, name)
		}
	}
	if len(unknown) > 0 && c.warnedUnknown.CompareAndSwap(false, true) {
		c.logger.Warn("frequency_cap_console cap_sets names cap sets this config does not have: the console shows nothing of them; check the names against the frequency_cap handlers' name",
			zap.Strings("unknown", unknown), zap.Strings("cap_sets", c.CapSets))
	}
}

// notShown answers a request about a cap set the console does not list:
// unknown when the config has none of that name, else not among cap_sets.
func (c *Console) notShown(w http.ResponseWriter, name string) error {
	if cs, _ := capset.Lookup(name); cs == nil {
		return unknownCapSet(w, name)
	}
	return reply.JSON(w, http.StatusNotFound, "application/json", struct {
		Error string `json:"error"`
		Name  string `json:"name"`
	}{fmt.Sprintf("frequency_cap handler %s is not among this console's cap_sets (%s)", name, strings.Join(c.CapSets, " ")), name})
}
