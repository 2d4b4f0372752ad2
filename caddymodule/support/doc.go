// Package support is the support surfaces of frequency caps: the support
// console (http.handlers.frequency_cap_console, a page and its JSON API)
// and the admin API (admin.api.frequency_cap on Caddy's admin endpoint),
// with the usage, reset and records answers they share. It reads cap sets
// only through caddymodule/internal/capset, the snapshot each
// frequency_cap handler registers at Provision; the handler's package
// does not import it. Importing this package registers both modules.
package support
