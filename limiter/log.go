package limiter

// This file is the record-log algorithm in Go, as the memory store runs it.
// lua/freqcap.lua is the same algorithm for Redis; the differential test
// holds the two to the same answers, decision by decision. Times are ms
// since the Unix epoch.

// entry is one record (or, in a bucketed log, one bucket of records): the
// time of its latest request and the units it holds.
type entry struct{ t, c int64 }

// subLog is the record log of one dimension tuple and weight. Entries are in
// strictly increasing time order: a record that would land on or before the
// last one is moved to 1 ms after it, so every admission has its own time
// and a refund can name it.
type subLog struct {
	retention int64 // ms
	entries   []entry
	// tombs are the record times already refunded from a bucketed log,
	// where a bucket cannot tell its requests apart.
	tombs []int64
}

// prune drops what no rule can need any more: records at or before
// now-retention.
func (s *subLog) prune(now int64) {
	cut := now - s.retention
	i := 0
	for i < len(s.entries) && s.entries[i].t <= cut {
		i++
	}
	if i > 0 {
		s.entries = append(s.entries[:0], s.entries[i:]...)
	}
	j := 0
	for _, t := range s.tombs {
		if t > cut {
			s.tombs[j] = t
			j++
		}
	}
	s.tombs = s.tombs[:j]
}

func (s *subLog) empty() bool { return len(s.entries) == 0 && len(s.tombs) == 0 }

// evaluate answers one rule for a request of the given cost at now, before
// anything is recorded.
func (s *subLog) evaluate(r *planRule, cost, now int64) (rawResult, error) {
	if r.window == 0 {
		start, end, ok := pickPeriod(r.bounds, now)
		if !ok {
			return rawResult{}, ErrClockSkew
		}
		var used int64
		for i := len(s.entries) - 1; i >= 0 && s.entries[i].t >= start; i-- {
			used += s.entries[i].c
		}
		res := rawResult{used: used, reset: end - now, ok: used+cost <= r.limit}
		if !res.ok {
			res.retry = end - now
		}
		return res, nil
	}
	cut := now - r.window
	first := len(s.entries)
	var used int64
	for i := len(s.entries) - 1; i >= 0 && s.entries[i].t > cut; i-- {
		used += s.entries[i].c
		first = i
	}
	res := rawResult{used: used, ok: used+cost <= r.limit}
	if used > 0 {
		res.reset = s.entries[first].t + r.window - now
	}
	if !res.ok {
		// The request fits once enough of the oldest records have left.
		res.retry = r.window
		if cost <= r.limit {
			need := used + cost - r.limit
			for i := first; i < len(s.entries); i++ {
				need -= s.entries[i].c
				if need <= 0 {
					res.retry = s.entries[i].t + r.window - now
					break
				}
			}
		}
	}
	return res, nil
}

// record adds an admitted request of the given cost and returns the time it
// was recorded at.
func (s *subLog) record(now, cost, grain int64) int64 {
	t := now
	n := len(s.entries)
	if n > 0 && s.entries[n-1].t >= t {
		t = s.entries[n-1].t + 1
	}
	if grain > 0 && n > 0 && s.entries[n-1].t/grain == t/grain {
		s.entries[n-1] = entry{t: t, c: s.entries[n-1].c + cost}
		return t
	}
	s.entries = append(s.entries, entry{t: t, c: cost})
	return t
}

// afterRecord is a rolling rule's Used and Reset once the request is in.
func (s *subLog) afterRecord(r *planRule, res *rawResult, cost, now int64) {
	res.used += cost
	if r.window == 0 {
		return
	}
	cut := now - r.window
	for _, e := range s.entries {
		if e.t > cut {
			res.reset = e.t + r.window - now
			return
		}
	}
}

// refund takes back the record made at t with the given cost, once.
func (s *subLog) refund(t, cost, grain int64) bool {
	if grain == 0 {
		for i, e := range s.entries {
			if e.t == t && e.c == cost {
				s.entries = append(s.entries[:i], s.entries[i+1:]...)
				return true
			}
		}
		return false
	}
	for _, x := range s.tombs {
		if x == t {
			return false
		}
	}
	for i, e := range s.entries {
		if e.t >= t && e.t/grain == t/grain && e.c >= cost {
			if e.c == cost {
				s.entries = append(s.entries[:i], s.entries[i+1:]...)
			} else {
				s.entries[i].c -= cost
			}
			s.tombs = append(s.tombs, t)
			return true
		}
	}
	return false
}

// expiry is when the last record of s leaves its retention.
func (s *subLog) expiry() int64 {
	var e int64
	if n := len(s.entries); n > 0 {
		e = s.entries[n-1].t + s.retention
	}
	for _, t := range s.tombs {
		e = max(e, t+s.retention)
	}
	return e
}
