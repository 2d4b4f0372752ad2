package h2scheme

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"fmt"
)

// handshake performs the TLS handshake that Go's server would have done
// before reading, bounded by HandshakeTimeout, and applies the HTTP/2
// security checks that x/net's server applies only to a connection that
// reports its TLS state (RFC 9113 §9.2). Caddy hides that state from the
// server on a wrapped connection, so without this a client could speak
// HTTP/2 over TLS 1.0 or a prohibited cipher suite.
func (c *Conn) handshake() error {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.HandshakeTimeout)
	defer cancel()
	if err := c.tls.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("h2scheme: TLS handshake: %w", err)
	}
	st := c.tls.ConnectionState()
	if st.NegotiatedProtocol == "h2" {
		if reason := inadequateSecurity(st); reason != "" {
			c.goAway(codeInadequateSecurity)
			return fmt.Errorf("h2scheme: %s", reason)
		}
	}
	c.step = stepPreface
	return nil
}

// inadequateSecurity says why HTTP/2 must not run over st, or "".
func inadequateSecurity(st tls.ConnectionState) string {
	if st.Version < tls.VersionTLS12 {
		return "TLS version too low for HTTP/2"
	}
	if st.Version == tls.VersionTLS12 && !http2CipherSuite(st.CipherSuite) {
		return fmt.Sprintf("TLS 1.2 cipher suite %s is prohibited for HTTP/2", tls.CipherSuiteName(st.CipherSuite))
	}
	return ""
}

// http2CipherSuite reports whether a TLS 1.2 suite may carry HTTP/2:
// RFC 9113 Appendix A prohibits every suite without an ephemeral key
// exchange or with a null, stream or block cipher, which of what Go's TLS
// implements leaves the ECDHE suites with AEAD ciphers. (TLS 1.3's suites
// are all allowed.)
func http2CipherSuite(id uint16) bool {
	switch id {
	case tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
		tls.TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
		tls.TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
		tls.TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
		tls.TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
		tls.TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256:
		return true
	}
	return false
}

// goAway writes a GOAWAY frame with code, as Go's server ends a
// connection it refuses. It is written before the server has written
// anything (the server has read nothing yet), so it cannot tear a frame.
func (c *Conn) goAway(code uint32) {
	var f [frameHeaderLen + 8]byte
	f[2], f[3] = 8, typeGoAway
	binary.BigEndian.PutUint32(f[frameHeaderLen+4:], code)
	_, _ = c.Conn.Write(f[:])
}
