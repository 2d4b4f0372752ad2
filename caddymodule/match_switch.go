package caddymodule

import (
	"github.com/caddyserver/caddy/v2"
	"go.uber.org/zap"
)

// warnMatchesEverything logs, at start, an exempt or skip whose
// placeholder reads nothing of a request ({env.NO_CAPS}: a switch per
// deployment, which loads) and has one of its values here: then every
// request is exempt, or passes uncapped, and the log says so rather than
// leave it to be found from the traffic.
func (h *Handler) warnMatchesEverything() {
	for _, m := range []struct {
		what   string
		cfg    *ExemptConfig
		values map[string]bool
		effect string
	}{
		{"exempt", h.Exempt, h.exempt, "every request is admitted past every rule and quiet range, and counted"},
		{"skip", h.Skip, h.skip, "every request passes on without a decision: nothing is capped or counted"},
	} {
		if m.cfg == nil || readsRequest(m.cfg.Placeholder) {
			continue
		}
		if v := caddy.NewReplacer().ReplaceAll(m.cfg.Placeholder, ""); m.values[v] {
			h.logger.Warn("frequency cap "+m.what+" matches every request here",
				zap.String("handler", h.Name), zap.String(m.what, m.cfg.Placeholder), zap.String("value", v), zap.String("effect", m.effect))
		}
	}
}
