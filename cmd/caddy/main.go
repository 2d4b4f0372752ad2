// Command caddy is Caddy with the standard modules and caddy-freqcap, as
// xcaddy would build it: xcaddy build --with github.com/freqcap/caddy-freqcap
package main

import (
	caddycmd "github.com/caddyserver/caddy/v2/cmd"

	_ "github.com/caddyserver/caddy/v2/modules/standard"

	_ "github.com/freqcap/caddy-freqcap"
)

func main() {
	caddycmd.Main()
}
