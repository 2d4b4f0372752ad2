package recordlogv2

// PickPeriod returns the start and end of the period holding now among the
// bounds, and false when now is outside them all.
func PickPeriod(b [4]int64, now int64) (start, end int64, ok bool) {
	for i := 0; i < 3; i++ {
		if b[i] <= now && now < b[i+1] {
			return b[i], b[i+1], true
		}
	}
	return 0, 0, false
}
