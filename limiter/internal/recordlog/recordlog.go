package recordlog

// This file is the record-log algorithm in Go, as the memory store runs it.
// lua/freqcap.lua is the same algorithm for Redis; the differential test
// holds the two to the same answers, decision by decision. Times are ms
// since the Unix epoch.

import "slices"

// LogRule is what a log needs of a rule to answer it.
type LogRule struct {
	Limit  int64    // what the store decides with
	Window int64    // ms; 0 for a calendar rule
	Bounds [4]int64 // calendar period starts, ms since the epoch
}

// RawResult is one rule's answer from a log, before the plan turns it
// into a Result.
type RawResult struct {
	Used, Reset, Retry int64
	Ok                 bool
}

// Entry is one record (or, in a bucketed log, one bucket of records): the
// time of its latest request and the units it holds.
type Entry struct{ T, C int64 }

// SubLog is the record log of one dimension tuple and weight. Entries are in
// strictly increasing time order, and every admission gets a time of its
// own, later than any the log has held: a record that would land on or
// before the newest entry, a refunded record or the floor is moved to 1 ms
// after it. So an admission id names one admission, ever, but in a
// bucketed log past one admission a millisecond (see Record).
type SubLog struct {
	Retention int64 // ms
	Entries   []Entry
	// tombs are the times of refunded records: a second refund of one is
	// refused (in a bucketed log, the bucket could not tell).
	tombs []int64
	// floor is the newest time Reset forgot: refunds at or before it are
	// refused, and new records come after it.
	floor int64
}

// prune drops what no rule can need any more: records, tombs and the floor
// at or before now-retention.
func (s *SubLog) prune(now int64) {
	cut := now - s.Retention
	if s.floor <= cut {
		s.floor = 0
	}
	i := 0
	for i < len(s.Entries) && s.Entries[i].T <= cut {
		i++
	}
	if i > 0 {
		s.Entries = append(s.Entries[:0], s.Entries[i:]...)
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

func (s *SubLog) empty() bool { return len(s.Entries) == 0 && len(s.tombs) == 0 && s.floor == 0 }

// newest is the latest time the log has held: entries, tombs, floor.
func (s *SubLog) newest() int64 {
	t := s.floor
	if n := len(s.Entries); n > 0 {
		t = max(t, s.Entries[n-1].T)
	}
	for _, x := range s.tombs {
		t = max(t, x)
	}
	return t
}

// Forget drops every record, keeping the floor (see subLog).
func (s *SubLog) Forget() {
	s.floor = s.newest()
	s.Entries, s.tombs = s.Entries[:0], s.tombs[:0]
}

// ForgetBefore drops the records and tombs at or before cut and keeps the
// later ones; the floor becomes the newest time it forgot (or stays, when
// newer), so a refund of a forgotten record is refused and new records
// still come after everything the log held. A record merged into a
// bucket is kept with its bucket when the bucket's time is after cut.
func (s *SubLog) ForgetBefore(cut int64) {
	i := 0
	for i < len(s.Entries) && s.Entries[i].T <= cut {
		s.floor = max(s.floor, s.Entries[i].T)
		i++
	}
	s.Entries = append(s.Entries[:0], s.Entries[i:]...)
	j := 0
	for _, t := range s.tombs {
		if t > cut {
			s.tombs[j] = t
			j++
		} else {
			s.floor = max(s.floor, t)
		}
	}
	s.tombs = s.tombs[:j]
}

// Evaluate answers one rule for a request of the given cost at now, before
// anything is recorded. A request of cost 0 counts nothing, so it is
// admitted even where the log holds more than the limit (exempt sends, or
// a lower per-request limit, put it there).
func (s *SubLog) Evaluate(r *LogRule, cost, now int64) (RawResult, error) {
	if r.Window == 0 {
		start, end, ok := PickPeriod(r.Bounds, now)
		if !ok {
			return RawResult{}, ErrClockSkew
		}
		var used int64
		for i := len(s.Entries) - 1; i >= 0 && s.Entries[i].T >= start; i-- {
			used += s.Entries[i].C
		}
		res := RawResult{Used: used, Reset: end - now, Ok: cost == 0 || used+cost <= r.Limit}
		if !res.Ok {
			res.Retry = end - now
		}
		return res, nil
	}
	cut := now - r.Window
	first := len(s.Entries)
	var used int64
	for i := len(s.Entries) - 1; i >= 0 && s.Entries[i].T > cut; i-- {
		used += s.Entries[i].C
		first = i
	}
	res := RawResult{Used: used, Ok: cost == 0 || used+cost <= r.Limit}
	if used > 0 {
		res.Reset = s.Entries[first].T + r.Window - now
	}
	if !res.Ok {
		// The request fits once enough of the oldest records have left.
		res.Retry = r.Window
		if cost <= r.Limit {
			need := used + cost - r.Limit
			for i := first; i < len(s.Entries); i++ {
				need -= s.Entries[i].C
				if need <= 0 {
					res.Retry = s.Entries[i].T + r.Window - now
					break
				}
			}
		}
	}
	return res, nil
}

// Record adds an admitted request of the given cost and returns the time it
// was recorded at: 1 ms after the newest the log has held when that is not
// earlier than now, so that an admission id names one admission. In a
// bucketed log that time stays in now's bucket: past it, the record takes
// the newest entry's time instead (its id then names the admissions of
// that time together, and one refund of them is taken). Otherwise a log
// taking more than one admission a millisecond would stamp its records
// ever further ahead of the clock, and count them that much longer than
// their window. When the newest time is a refunded record's (a tomb) or
// the floor, whose ids a refund refuses, the record still takes 1 ms
// after it: once a refund or a reset.
func (s *SubLog) Record(now, cost, grain int64) int64 {
	t := max(now, s.newest()+1)
	if n := len(s.Entries); grain > 0 && t > now && t/grain != now/grain &&
		n > 0 && s.Entries[n-1].T == t-1 && !slices.Contains(s.tombs, t-1) {
		t--
	}
	n := len(s.Entries)
	// A bucket whose sum would outgrow what a record keeps (MaxCost)
	// takes no more: the record starts an entry of its own in the same
	// bucket, as freqcap.lua does.
	if grain > 0 && n > 0 && s.Entries[n-1].T/grain == t/grain && s.Entries[n-1].C+cost <= MaxCost {
		s.Entries[n-1] = Entry{T: t, C: s.Entries[n-1].C + cost}
		return t
	}
	s.Entries = append(s.Entries, Entry{T: t, C: cost})
	if len(s.Entries) > MaxEntries {
		s.mergeOldest()
	}
	return t
}

// mergeOldest makes room in a log past MaxEntries entries, which could not
// be stored: the oldest two entries whose units fit one become one, at the
// later one's time, as freqcap.lua does. Limits bound a log's records (see
// limiter.CheckLogs) but not the records past them that never deny: a
// shadow rule's and exempt sends'. Failing their write would fail every
// later decision on the log, leaving its caps to on_error. A merged entry
// counts all its units until the later record leaves a window, so counts
// are never lower than exact, a denial never later; its records can no
// longer be refunded one by one (a refund finds no entry of its time and
// cost, and gives nothing back).
func (s *SubLog) mergeOldest() {
	for i := 0; i+1 < len(s.Entries); i++ {
		if s.Entries[i].C+s.Entries[i+1].C <= MaxCost {
			s.Entries[i+1].C += s.Entries[i].C
			s.Entries = append(s.Entries[:i], s.Entries[i+1:]...)
			return
		}
	}
}

// AfterRecord is a rolling rule's Used and Reset once the request is in.
func (s *SubLog) AfterRecord(r *LogRule, res *RawResult, cost, now int64) {
	res.Used += cost
	if r.Window == 0 {
		return
	}
	cut := now - r.Window
	for _, e := range s.Entries {
		if e.T > cut {
			res.Reset = e.T + r.Window - now
			return
		}
	}
}

// Refund takes back the record made at t with the given cost, once. The
// caller has pruned the log at now.
func (s *SubLog) Refund(t, cost, grain, now int64) bool {
	if t <= s.floor || t <= now-s.Retention || len(s.tombs) >= MaxEntries {
		return false // past maxEntries refunds, the log could not be stored
	}
	for _, x := range s.tombs {
		if x == t {
			return false
		}
	}
	for i, e := range s.Entries {
		if grain == 0 && (e.T != t || e.C != cost) {
			continue
		}
		if grain > 0 && (e.T < t || e.T/grain != t/grain || e.C < cost) {
			continue
		}
		if e.C == cost {
			s.Entries = append(s.Entries[:i], s.Entries[i+1:]...)
		} else {
			s.Entries[i].C -= cost
		}
		s.tombs = append(s.tombs, t)
		return true
	}
	return false
}

// expiry is when everything s holds leaves its retention.
func (s *SubLog) expiry() int64 { return s.newest() + s.Retention }
