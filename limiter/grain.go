package limiter

// This file is the bucketing policy: which logs merge their records into
// buckets, and how wide a bucket may be.

// BucketThreshold is the largest limit kept as exact records. A log read by
// a rule with a larger limit merges its records into buckets (see grainFor),
// so its memory is bounded by its retention divided by the bucket width,
// whatever the limit.
const BucketThreshold = 1000

// grainLadder lists the bucket widths in ms. Each divides the next, and all
// divide 15 minutes, so a bucket never straddles a local midnight in any
// zone whose UTC offset is a whole number of quarter hours (every zone in use
// today).
var grainLadder = [...]int64{10, 100, 1000, 10_000, 60_000, 900_000}

// grainBound is the widest bucket a rule tolerates: a thousandth of a
// rolling window, a minute for a calendar day, 15 minutes for a week or a
// month.
func grainBound(r *Rule) int64 {
	switch r.Window.Unit {
	case Rolling:
		return r.Window.Duration.Milliseconds() / 1000
	case Day:
		return 60_000
	}
	return grainLadder[len(grainLadder)-1]
}

// grainFor picks the bucket width of a log: 0 (exact) when every limit is at
// most BucketThreshold; otherwise the widest ladder step within the bound
// that every rule over the log tolerates (0 when none fits). A merged record
// takes the time of the latest request in it, so a rolling rule may count
// it up to one bucket longer than exact (never shorter: never
// over-admitting); calendar counts stay exact.
func grainFor(maxLimit, bound int64) int64 {
	if maxLimit <= BucketThreshold {
		return 0
	}
	var g int64
	for _, step := range grainLadder {
		if step <= bound {
			g = step
		}
	}
	return g
}
