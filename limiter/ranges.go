package limiter

import "github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"

// The ranges the numbers of a decision stay in, on every path (the memory
// store, Redis decided in Go, Redis decided in lua/freqcap.lua), so that
// none is cut short or overflows: a log keeps each record's cost in four
// bytes, the script sends limits and costs in six, and Lua counts exactly
// below 2^53. What a log counts (used, exempt sends included) is at most
// 65,535 records of MaxCost, below 2^48.
const (
	// MaxCost is the most one request may cost a rule: 4,294,967,295
	// units. A larger amount is counted in a larger unit (KiB, not bytes).
	// Records that share a time bucket hold up to MaxCost together; past
	// it, a record starts an entry of its own.
	MaxCost = recordlog.MaxCost
	// MaxLimit is the largest limit of a rule (Rule.Limit) or of one
	// request (Check.Limit): 2^40.
	MaxLimit = 1 << 40
)
