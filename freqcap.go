// Package freqcap is what xcaddy imports: it registers the frequency_cap
// handler, the support console (frequency_cap_console), the admin API
// (admin.api.frequency_cap) and the listener wrapper h2_scheme
// (caddy.listeners.h2_scheme) with Caddy.
//
//	xcaddy build --with github.com/freqcap/caddy-freqcap
package freqcap

import (
	// Each package registers its Caddy modules when imported: the handler
	// in caddymodule, the console and the admin API in caddymodule/support,
	// the listener wrapper in caddymodule/h2scheme.
	_ "github.com/freqcap/caddy-freqcap/caddymodule"
	_ "github.com/freqcap/caddy-freqcap/caddymodule/h2scheme"
	_ "github.com/freqcap/caddy-freqcap/caddymodule/support"
)
