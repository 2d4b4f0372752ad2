// Package memstore is the embedded store: every record log of one process
// kept in its memory, for a gateway that runs alone or as the local store
// behind Redis (limiter.Fallback).
//
// It owns the shards and their arenas (keys and values side by side in
// pages that never move, with no Go pointer per key, so the garbage
// collector never walks the store), the locking that makes a decision or a
// batch one atomic step, and the sweep of expired keys. What a key holds,
// and how a plan is decided over it, is the engine's (limiter and
// limiter/internal/recordlog): the same bytes and the same code as the
// Redis store's decisions made in Go.
//
// A Store is safe for concurrent use; its zero value is not usable (call
// New), and Close stops its sweeper.
package memstore
