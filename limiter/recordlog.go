package limiter

// This file is the record-log algorithm in Go, as the memory store runs it.
// lua/freqcap.lua is the same algorithm for Redis; the differential test
// holds the two to the same answers, decision by decision. Times are ms
// since the Unix epoch.

// entry is one record (or, in a bucketed log, one bucket of records): the
// time of its latest request and the units it holds.
type entry struct{ t, c int64 }

// subLog is the record log of one dimension tuple and weight. Entries are in
// strictly increasing time order, and every admission gets a time of its
// own, later than any the log has held: a record that would land on or
// before the newest entry, a refunded record or the floor is moved to 1 ms
// after it. So an admission id names one admission, ever.
type subLog struct {
	retention int64 // ms
	entries   []entry
	// tombs are the times of refunded records: a second refund of one is
	// refused (in a bucketed log, the bucket could not tell).
	tombs []int64
	// floor is the newest time Reset forgot: refunds at or before it are
	// refused, and new records come after it.
	floor int64
}

// prune drops what no rule can need any more: records, tombs and the floor
// at or before now-retention.
func (s *subLog) prune(now int64) {
	cut := now - s.retention
	if s.floor <= cut {
		s.floor = 0
	}
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

func (s *subLog) empty() bool { return len(s.entries) == 0 && len(s.tombs) == 0 && s.floor == 0 }

// newest is the latest time the log has held: entries, tombs, floor.
func (s *subLog) newest() int64 {
	t := s.floor
	if n := len(s.entries); n > 0 {
		t = max(t, s.entries[n-1].t)
	}
	for _, x := range s.tombs {
		t = max(t, x)
	}
	return t
}

// forget drops every record, keeping the floor (see subLog).
func (s *subLog) forget() {
	s.floor = s.newest()
	s.entries, s.tombs = s.entries[:0], s.tombs[:0]
}

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
	t := max(now, s.newest()+1)
	n := len(s.entries)
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

// refund takes back the record made at t with the given cost, once. The
// caller has pruned the log at now.
func (s *subLog) refund(t, cost, grain, now int64) bool {
	if t <= s.floor || t <= now-s.retention || len(s.tombs) >= maxEntries {
		return false // past maxEntries refunds, the log could not be stored
	}
	for _, x := range s.tombs {
		if x == t {
			return false
		}
	}
	for i, e := range s.entries {
		if grain == 0 && (e.t != t || e.c != cost) {
			continue
		}
		if grain > 0 && (e.t < t || e.t/grain != t/grain || e.c < cost) {
			continue
		}
		if e.c == cost {
			s.entries = append(s.entries[:i], s.entries[i+1:]...)
		} else {
			s.entries[i].c -= cost
		}
		s.tombs = append(s.tombs, t)
		return true
	}
	return false
}

// expiry is when everything s holds leaves its retention.
func (s *subLog) expiry() int64 { return s.newest() + s.retention }
