// Package freqcap is what xcaddy imports: it registers the frequency_cap
// handler, the support console (frequency_cap_console) and the admin API
// (admin.api.frequency_cap) with Caddy.
//
//	xcaddy build --with github.com/freqcap/caddy-freqcap
package freqcap

import (
	// Each package registers its Caddy modules when imported: the handler
	// in caddymodule, the console and the admin API in caddymodule/support.
	_ "github.com/freqcap/caddy-freqcap/caddymodule"
	_ "github.com/freqcap/caddy-freqcap/caddymodule/support"
)
