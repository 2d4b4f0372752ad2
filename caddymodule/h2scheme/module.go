// Package h2scheme registers the listener wrapper `h2_scheme`
// (caddy.listeners.h2_scheme), which lets HTTP/2 clients that write
// `:scheme: https:` (firebase-admin for Node) through Caddy. The work is
// internal/h2scheme's; this package is its Caddy glue.
package h2scheme

import (
	"fmt"
	"net"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/dustin/go-humanize"
	"go.uber.org/zap"

	"github.com/freqcap/caddy-freqcap/internal/h2scheme"
)

func init() {
	caddy.RegisterModule(Wrapper{})
}

// Wrapper fixes the `:scheme` pseudo-header of HTTP/2 requests that
// write it with a trailing colon ("https:", "http:"), which Go's HTTP/2
// server refuses with PROTOCOL_ERROR before any handler runs. Every other
// check of Go's server stays: the wrapper re-applies the TLS checks that
// a wrapped connection would skip, and bounds each header block while
// decoding it. Put it after the TLS listener (Caddy puts `tls` first when
// the list does not name it):
//
//	{
//		servers {
//			listener_wrappers {
//				h2_scheme
//			}
//		}
//	}
type Wrapper struct {
	// HandshakeTimeout bounds the TLS handshake, which the wrapper performs
	// on a connection's first read. Default: 10s.
	HandshakeTimeout caddy.Duration `json:"handshake_timeout,omitempty"`

	// MaxHeaderBytes bounds one header block (the decoded header list in
	// HPACK's measure, and the raw bytes of its frames); a client that
	// sends a larger one is disconnected. It is what one connection may
	// make the wrapper hold. Keep it above the server's max_header_size
	// (raise it with it), so that the server answers 431 itself to the
	// sizes between. Default: 32 KiB + 320 bytes, twice Caddy's default
	// max_header_size of 16 KiB.
	MaxHeaderBytes int `json:"max_header_bytes,omitempty"`

	logger *zap.Logger
	// warnedTLS: a connection showed the wrapper placed before tls
	// (logged once).
	warnedTLS *atomic.Bool
}

// Provision takes the logger for the warning of a wrapper placed before
// tls.
func (w *Wrapper) Provision(ctx caddy.Context) error {
	w.logger, w.warnedTLS = ctx.Logger(), new(atomic.Bool)
	return nil
}

// CaddyModule returns the Caddy module information.
func (Wrapper) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{
		ID:  "caddy.listeners.h2_scheme",
		New: func() caddy.Module { return new(Wrapper) },
	}
}

// Validate checks the bounds.
func (w *Wrapper) Validate() error {
	if w.HandshakeTimeout < 0 {
		return fmt.Errorf("h2_scheme: handshake_timeout must not be negative")
	}
	if w.MaxHeaderBytes < 0 || w.MaxHeaderBytes > 1<<30 {
		return fmt.Errorf("h2_scheme: max_header_bytes %d is not a size between 1 B and 1 GiB (0: the default)", w.MaxHeaderBytes)
	}
	return nil
}

// WrapListener wraps every connection ln accepts.
func (w *Wrapper) WrapListener(ln net.Listener) net.Listener {
	return &h2scheme.Listener{Listener: ln, Options: h2scheme.Options{
		HandshakeTimeout:  time.Duration(w.HandshakeTimeout),
		MaxHeaderListSize: w.MaxHeaderBytes,
		SeesTLS:           w.seesTLS,
	}}
}

// seesTLS warns, once, that the wrapper is placed before tls: Caddy
// accepts the order, and the wrapper then lets every request it exists for
// be refused.
func (w *Wrapper) seesTLS() {
	if w.warnedTLS != nil && w.warnedTLS.CompareAndSwap(false, true) {
		w.logger.Warn("h2_scheme sees a TLS handshake: where the server serves TLS, h2_scheme is placed before tls in listener_wrappers and fixes nothing, " +
			"so remove tls from the list (Caddy puts it first) or write it before h2_scheme; on a plain-HTTP server, a client spoke TLS to it")
	}
}

// UnmarshalCaddyfile reads:
//
//	h2_scheme {
//		handshake_timeout <duration>
//		max_header_bytes  <size>
//	}
func (w *Wrapper) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the wrapper's name
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		switch d.Val() {
		case "handshake_timeout":
			if !d.NextArg() {
				return d.ArgErr()
			}
			dur, err := caddy.ParseDuration(d.Val())
			if err != nil || dur <= 0 {
				return d.Errf("h2_scheme: handshake_timeout %q is not a positive duration", d.Val())
			}
			w.HandshakeTimeout = caddy.Duration(dur)
		case "max_header_bytes":
			if !d.NextArg() {
				return d.ArgErr()
			}
			n, err := humanize.ParseBytes(d.Val())
			if err != nil || n == 0 || n > 1<<30 {
				return d.Errf("h2_scheme: max_header_bytes %q is not a size between 1 B and 1 GiB", d.Val())
			}
			w.MaxHeaderBytes = int(n)
		default:
			return d.Errf("h2_scheme: unrecognized subdirective %q", d.Val())
		}
		if d.NextArg() {
			return d.ArgErr()
		}
	}
	return nil
}

// Interface guards
var (
	_ caddy.ListenerWrapper = (*Wrapper)(nil)
	_ caddy.Provisioner     = (*Wrapper)(nil)
	_ caddy.Validator       = (*Wrapper)(nil)
	_ caddyfile.Unmarshaler = (*Wrapper)(nil)
)
