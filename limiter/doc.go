// Package limiter is the frequency-cap engine's core: it decides whether a
// send may go, against the history of what was sent. It owns the rules
// (windows, calendar periods, quiet ranges), the requests and decisions,
// the Store interface, and the plan that every store executes. It knows
// no store and nothing of HTTP: the stores are packages of their own
// (memstore, embedded in one process; redisstore, shared by many gateways
// through Redis), and the caddymodule package turns requests into
// Requests.
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
// What the stores share lives here or below: Plan, Section, DecideOn,
// KeySource, HistoryOn and HeldOf are how a store decides, reads and lists
// the logs of a plan, and limiter/internal/recordlog holds the record logs
// themselves (the algorithm and the bytes both stores keep). Fallback
// composes two stores through the Store interface alone: a primary
// (Redis) and a local one used while the primary fails.
//
// Every store is safe for concurrent use; Close releases what it holds.
// Errors from a store wrap ErrStore, ErrTimeout or ErrClockSkew.
package limiter
