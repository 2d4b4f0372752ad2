// Package bodycodec reads request bodies sent with a Content-Encoding
// (gzip, deflate, zstd) and writes them back the same way.
//
// A gateway reads the body only to learn who a message is for; the bytes
// it passes on are the sender's own. So Decode is given the bytes as sent
// and a limit on what they may expand to, and stops as soon as the output
// passes it: a body of a few kilobytes that expands to gigabytes costs the
// decoding of limit+1 bytes, never more memory than that (zstd: plus the
// window, at most 8 MiB as RFC 9659 allows). Encode is needed only when the
// gateway rewrote the body (batch drop), so that the upstream gets it in
// the coding the sender chose.
//
// "deflate" is, in HTTP, the zlib format (RFC 9110, section 8.4.1.2); some
// clients send raw deflate under that name, so Decode accepts both and
// reports which it found, for Encode to write the same.
//
// Decoders and encoders come from github.com/klauspost/compress, which
// Caddy's own encode module already builds in; they are pooled, so a
// request allocates its output and little else. Everything here is safe
// for concurrent use.
package bodycodec
