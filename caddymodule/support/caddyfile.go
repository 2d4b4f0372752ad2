package support

import (
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// The directive frequency_cap_console is registered and ordered in
// caddyfile.go, next to frequency_cap, which it must precede.

func init() {
	httpcaddyfile.RegisterHandlerDirective("frequency_cap_console", parseConsoleCaddyfile)
}

func parseConsoleCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	c := new(Console)
	err := c.UnmarshalCaddyfile(h.Dispenser)
	return c, err
}

// UnmarshalCaddyfile implements caddyfile.Unmarshaler. Syntax:
//
//	frequency_cap_console [<matcher>] [{
//	    cap_sets    <name>...
//	    read_only
//	    user_header <field>
//	    public
//	}]
//
// Each subdirective may appear once. Mount it on a path prefix behind
// authentication (without it, the console answers 403), for example:
//
//	basic_auth /support/* {
//	    alice <bcrypt hash from caddy hash-password>
//	}
//	frequency_cap_console /support/*
func (c *Console) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive name
	if d.NextArg() {
		return d.ArgErr()
	}
	seen := map[string]bool{}
	for nesting := d.Nesting(); d.NextBlock(nesting); {
		sub := d.Val()
		if seen[sub] {
			return d.Errf("%s already specified", sub)
		}
		seen[sub] = true
		switch sub {
		case "cap_sets":
			c.CapSets = d.RemainingArgs()
			if len(c.CapSets) == 0 {
				return d.ArgErr()
			}
			for _, name := range c.CapSets {
				if !limiter.ValidDimensionName(name) {
					return d.Errf("cap_sets: invalid name %q (a letter or '_', then letters, digits, '_', '.', '-')", name)
				}
			}
		case "read_only":
			c.ReadOnly = true
			if d.NextArg() {
				return d.ArgErr()
			}
		case "public":
			c.Public = true
			if d.NextArg() {
				return d.ArgErr()
			}
		case "user_header":
			if !d.AllArgs(&c.UserHeader) {
				return d.ArgErr()
			}
		default:
			return d.Errf("unrecognized subdirective %q", sub)
		}
	}
	return nil
}
