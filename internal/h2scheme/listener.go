package h2scheme

import "net"

// Listener wraps each connection its listener accepts (see Wrap). Put it
// directly after the TLS listener, so that it sees each *tls.Conn.
type Listener struct {
	net.Listener
	Options Options
}

// Accept waits for the next connection and wraps it. It does no I/O of
// its own: the TLS handshake waits for the connection's first Read.
func (l *Listener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return Wrap(c, l.Options), nil
}
