package limiter

import "bytes"

// keySource is where a decision finds its keys: the memory store's shards,
// or the values a Redis batch has read.
type keySource interface {
	// lookup returns the key of p's section si pruned at now, or nil when
	// it does not exist.
	lookup(p *plan, si int, now int64) *keyLogs
	// create returns a new empty key stored under the key of p's section si.
	create(p *plan, si int) *keyLogs
}

// emptyLog stands for a missing log when reading; nothing writes to it.
var emptyLog subLog

// decideOn decides p at now over the keys of src, as one atomic step (the
// caller holds whatever makes it so), and records it when admitted and
// record is set. It fills p.raw, one answer per rule, and each section's
// recorded time; p.keyLogs holds each section's key afterwards (nil for a
// key that does not exist).
func decideOn(src keySource, p *plan, now int64, record bool) (bool, error) {
	// Each key is looked up (and pruned) once, however many sections read it.
	keys := p.keyLogs[:0]
	admitted := true
	for si := range p.sections {
		s := &p.sections[si]
		k, l := sectionLog(src, p, si, keys, now)
		keys = append(keys, k)
		for ri := s.r0; ri < s.r1; ri++ {
			r, err := l.evaluate(&p.rules[ri], s.cost, now)
			if err != nil {
				p.keyLogs = keys
				return false, err
			}
			admitted = admitted && r.ok
			p.raw = append(p.raw, r)
		}
	}
	p.keyLogs = keys
	if !admitted || !record {
		return admitted, nil
	}
	for si := range p.sections {
		s := &p.sections[si]
		if s.cost == 0 {
			continue // counts nothing: its log stays as it is, as in the script
		}
		k := keys[si]
		if k == nil {
			if k = sameKey(p, si, keys); k == nil {
				k = src.create(p, si)
			}
			keys[si] = k
		}
		l := k.sub(p.sub(s))
		l.retention = s.retention
		s.recorded = l.record(now, s.cost, s.grain)
		for ri := s.r0; ri < s.r1; ri++ {
			l.afterRecord(&p.rules[ri], &p.raw[ri], s.cost, now)
		}
		k.refreshExpiry()
	}
	return true, nil
}

// sameKey returns the key an earlier section of p with the same key has
// already looked up, or nil.
func sameKey(p *plan, si int, keys []*keyLogs) *keyLogs {
	for j := 0; j < si && j < len(keys); j++ {
		if keys[j] != nil && bytes.Equal(p.key(&p.sections[j]), p.key(&p.sections[si])) {
			return keys[j]
		}
	}
	return nil
}

// sectionLog returns the key of section si (looked up in src unless an
// earlier section, whose keys are keys, read it) and the section's log in
// it (emptyLog when either is missing).
func sectionLog(src keySource, p *plan, si int, keys []*keyLogs, now int64) (*keyLogs, *subLog) {
	k := sameKey(p, si, keys)
	if k == nil && !p.keySeen(si) {
		k = src.lookup(p, si, now)
	}
	if k != nil {
		if found := k.find(p.sub(&p.sections[si])); found != nil {
			return k, found
		}
	}
	return k, &emptyLog
}
