package limiter

import (
	"fmt"
)

// BatchMode says what a denied request does to the rest of its batch (see
// Store.DecideBatch).
type BatchMode uint8

const (
	// BatchAll records the batch only if every request in it is
	// admitted: a denial anywhere records nothing anywhere.
	BatchAll BatchMode = iota
	// BatchEach records every admitted request and skips the denied ones.
	BatchEach
)

func (m BatchMode) String() string {
	switch m {
	case BatchAll:
		return "all"
	case BatchEach:
		return "each"
	}
	return fmt.Sprintf("BatchMode(%d)", uint8(m))
}

// MaxBatch is the most requests one DecideBatch takes: the Redis script
// counts a run's decisions in two bytes.
const MaxBatch = 65535

// CheckBatch refuses a batch no store can decide.
func CheckBatch(reqs []Request, mode BatchMode) error {
	if mode != BatchAll && mode != BatchEach {
		return fmt.Errorf("unknown batch mode %d", mode)
	}
	if len(reqs) > MaxBatch {
		return fmt.Errorf("a batch of %d requests; at most %d", len(reqs), MaxBatch)
	}
	return nil
}

// AnyDenied reports whether a decision of ds refuses its request.
func AnyDenied(ds []*Decision) bool {
	for _, d := range ds {
		if !d.Allowed {
			return true
		}
	}
	return false
}

// ForgetIDs takes back the admission ids of a batch that recorded nothing.
func ForgetIDs(ds []*Decision) {
	for _, d := range ds {
		d.id = nil
	}
}
