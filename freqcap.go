// Package freqcap is what xcaddy imports: it registers the frequency_cap
// handler and its admin API with Caddy.
//
//	xcaddy build --with github.com/freqcap/caddy-freqcap
package freqcap

import (
	// The Caddy modules live in caddymodule; importing it registers them.
	_ "github.com/freqcap/caddy-freqcap/caddymodule"
)
