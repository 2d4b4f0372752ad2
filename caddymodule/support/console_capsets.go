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
// first list that finds one missing logs it; a request about a cap set
// not listed is answered with the names listed.

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

// notShown answers a request about a cap set the console does not list,
// naming the ones it does: whether the config has one of that name is not
// said, the console being scoped.
func (c *Console) notShown(w http.ResponseWriter, name string) error {
	return reply.JSON(w, http.StatusNotFound, "application/json", struct {
		Error string `json:"error"`
		Name  string `json:"name"`
	}{fmt.Sprintf("no frequency_cap handler named %s among this console's cap_sets (%s)", name, strings.Join(c.CapSets, " ")), name})
}
