// Package gosdk holds only tests: the Go SDK conformance tests of
// caddy-freqcap (see ../README.md).
package gosdk
