// Package recordlog is what both stores keep and neither may change
// alone: the record log (one log of admission times and costs per
// dimension tuple, and the algorithm that answers a rule from it), the
// logs of one key (KeyLogs), the bytes a key's value holds (the format
// lua/freqcap.lua reads and writes, and the memory store keeps), and the
// admission ids that name what a decision recorded.
//
// A value is a sequence of sub-logs, each an id, a header and its records'
// times as gaps back from the newest, to the ms. This version writes format
// 3, whose gaps take the fewest bytes that hold a sub-log's widest (blob.go
// has the layout, lua/freqcap.lua's header the same in the script's
// terms), and reads formats 1 and 2 as well; gateways of those versions
// refuse a value of format 3 with an error. The previous codecs are frozen
// in recordlogv1 and recordlogv2 for the tests that hold the versions to
// that.
//
// It imports nothing of the engine, so the engine, the memory store and the
// Redis store can all import it; users of the module cannot.
package recordlog
