package caddymodule_test

// The end-to-end tests configure the support console and the admin API
// beside frequency_cap, as a build of the module's root package has them.
import _ "github.com/freqcap/caddy-freqcap/caddymodule/support"
