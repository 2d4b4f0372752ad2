// Package recordlogv2 is the record log's value format 2 (format 1's
// layout, exempt marks in annexes) as it was before the compact layout of
// format 3 (commit 0d2b0dc, limiter/internal/recordlog), frozen: the codec and
// algorithm a gateway of the previous version runs. Only tests import it,
// to prove that the previous version refuses every value of format 3, and
// that this version reads what the previous one wrote. Never change it.
package recordlogv2
