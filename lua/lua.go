// Package lua holds the Redis scripts of the Redis store, embedded. Each
// script's header states its KEYS, ARGV and reply.
package lua

import _ "embed"

// Freqcap is freqcap.lua: decide, peek, refund and reset over record logs.
//
//go:embed freqcap.lua
var Freqcap string

// Commit is commit.lua: the compare-and-set write of decisions made in Go.
//
//go:embed commit.lua
var Commit string

// CommitNode is commit_node.lua: commit.lua for the keys of many slots on
// one cluster master.
//
//go:embed commit_node.lua
var CommitNode string

// StartCheck is startcheck.lua: what the gateway's user may call inside a
// script, asked once when a store starts.
//
//go:embed startcheck.lua
var StartCheck string
