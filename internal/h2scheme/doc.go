// Package h2scheme lets HTTP/2 clients that write the `:scheme`
// pseudo-header with a trailing colon ("https:", "http:") through Go's
// HTTP/2 server, which refuses such a request with PROTOCOL_ERROR before
// any handler runs. firebase-admin for Node writes "https:" on every
// request of its HTTP/2 transport (sendEach, sendEachForMulticast), and
// Google's front end accepts it.
//
// A Listener wraps the connections a TLS listener accepts. Each Conn reads
// the client's byte stream and hands the server the same stream with the
// scheme fixed:
//
//   - The TLS handshake happens lazily, in the first Read, bounded by a
//     timeout, and the HTTP/2 security checks that Go's server skips on a
//     connection that is not a *tls.Conn (TLS 1.2 or newer, no cipher
//     suite that RFC 9113 prohibits) are applied here: a connection that
//     fails them gets GOAWAY INADEQUATE_SECURITY, as from Go's server.
//   - Frames other than HEADERS and CONTINUATION pass byte for byte, and
//     a connection that is not HTTP/2 passes untouched.
//   - HPACK makes a one-header rewrite look impossible: a client adds
//     ":scheme: https:" to the dynamic table and refers to it by index
//     later, and an entry one byte shorter shifts every later eviction.
//     So every header block is decoded from the connection's start (to
//     see every field, and bound it), and a block that holds a scheme to
//     fix is transcoded, not re-encoded: each representation is copied
//     byte for byte but the literals that define a fixed value. The
//     server's table then holds the client's entries in order, the fixed
//     ones a byte shorter, so it is never fuller than the client's and
//     evicts nothing the client still names (see transcode). A block
//     without one passes as the client wrote it.
//   - A header block is bounded while it is decoded (the decoded header
//     list, each string, and the raw bytes of HEADERS plus CONTINUATION
//     frames, empty ones included), so an HPACK bomb or a CONTINUATION
//     flood costs bounded memory and time. Past the bound, or on any
//     framing or HPACK error, the connection is closed: never more
//     lenient than Go's server, which would end it too (or, for a header
//     list between its own limit and the wrapper's, answer 431 itself).
//
// The package knows nothing of Caddy; caddymodule/h2scheme registers it
// as the listener wrapper `h2_scheme`.
package h2scheme
