// Package limiter is the frequency-cap engine: it decides whether a send may
// go, against the history of what was sent, in an embedded store (Memory) or
// in Redis shared by many gateways (Redis). It knows nothing of HTTP; the
// caddymodule package turns requests into Requests.
//
// A Request holds one Check per Rule that applies. Decide is all or
// nothing: the request is admitted only if every check admits it, and then
// every check records it, in one atomic step; a denial records nothing.
// Concurrent decisions, from any number of goroutines or gateways sharing
// one Redis, never push a rule over its limit. On a Redis Cluster, checks
// whose keys lie on different shards are reserved on each and rolled back
// if any denies, so the guarantee holds there too.
//
// Time comes from one clock per store: the Redis server's TIME (so
// gateways with skewed clocks agree), or the memory store's clock. A
// Request with Now set is decided at that time instead, so tests and
// examples state their times rather than sleep.
//
// A key is a rule's first dimension and its value; a sub-log within it is
// the other dimensions, their values and the weight. Neither holds a
// limit, a window or a period, so changing a rule (raising, lowering,
// switching between rolling and calendar) takes effect at once with the
// history already recorded. Values are escaped so that none can forge
// another key, long ones are hashed, and idle keys expire on their own.
//
// Both stores are safe for concurrent use; their zero values are not
// usable (call NewMemory or NewRedis), and Close releases what they hold.
// Errors from a store wrap ErrStore, ErrTimeout or ErrClockSkew;
// ErrOutOfMemory and ErrNoPermission (both also ErrStore) name the two
// failures an operator must act on, and Reason names any failure for a
// metric or a log line.
package limiter
