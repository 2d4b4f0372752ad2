// Package recordlog is what both stores keep and neither may change
// alone: the record log (one log of admission times and costs per
// dimension tuple, and the algorithm that answers a rule from it), the
// logs of one key (KeyLogs), the bytes a key's value holds (the format
// lua/freqcap.lua reads and writes, and the memory store keeps), and the
// admission ids that name what a decision recorded. It imports nothing of
// the engine, so the engine, the memory store and the Redis store can all
// import it; users of the module cannot.
package recordlog
