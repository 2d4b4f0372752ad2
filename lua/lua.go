// Package lua holds the Redis scripts of the Redis store, embedded. Each
// script's header states its KEYS, ARGV and reply.
package lua

import _ "embed"

// Freqcap is freqcap.lua: decide, peek, refund and reset over record logs.
//
//go:embed freqcap.lua
var Freqcap string
