// Package limitertest holds the helpers that the tests of limiter's
// packages share: the seed config, requests by values, a settable clock,
// and the benchmark streams of the seed data set. It imports no store, so
// each store's own tests can import it.
package limitertest
