package limiter

import (
	"bytes"

	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"
)

// KeySource is where a decision finds its keys: the memory store's shards,
// or the values a Redis batch has read.
type KeySource interface {
	// lookup returns the key of p's section si pruned at now, or nil when
	// it does not exist.
	Lookup(p *Plan, si int, now int64) *recordlog.KeyLogs
	// create returns a new empty key stored under the key of p's section si.
	Create(p *Plan, si int) *recordlog.KeyLogs
}

// emptyLog stands for a missing log when reading; nothing writes to it.
var emptyLog recordlog.SubLog

// DecideOn decides p at now over the keys of src, as one atomic step (the
// caller holds whatever makes it so), and records it when admitted and
// record is set. It fills p.raw, one answer per rule, and each section's
// recorded time; p.keyLogs holds each section's key afterwards (nil for a
// key that does not exist).
func DecideOn(src KeySource, p *Plan, now int64, record bool) (bool, error) {
	// Each key is looked up (and pruned) once, however many sections read it.
	keys := p.KeyLogs[:0]
	admitted := true
	for si := range p.Sections {
		s := &p.Sections[si]
		k, l := sectionLog(src, p, si, keys, now)
		keys = append(keys, k)
		for ri := s.R0; ri < s.R1; ri++ {
			r, err := l.Evaluate(&p.Rules[ri].LogRule, s.Cost, now)
			if err != nil {
				p.KeyLogs = keys
				return false, err
			}
			admitted = admitted && r.Ok
			p.Raw = append(p.Raw, r)
		}
	}
	p.KeyLogs = keys
	if !admitted || !record {
		return admitted, nil
	}
	for si := range p.Sections {
		s := &p.Sections[si]
		if s.Cost == 0 {
			continue // counts nothing: its log stays as it is, as in the script
		}
		k := keys[si]
		if k == nil {
			if k = sameKey(p, si, keys); k == nil {
				k = src.Create(p, si)
			}
			keys[si] = k
		}
		l := k.Sub(p.Sub(s))
		l.Retention = s.Retention
		s.Recorded = l.Record(now, s.Cost, s.Grain)
		for ri := s.R0; ri < s.R1; ri++ {
			l.AfterRecord(&p.Rules[ri].LogRule, &p.Raw[ri], s.Cost, now)
		}
		if p.Exempt {
			k.MarkExempt(p.ExemptID(s), s.Recorded, s.Cost, s.Retention, s.Grain)
		}
		k.RefreshExpiry()
	}
	return true, nil
}

// sameKey returns the key an earlier section of p with the same key has
// already looked up, or nil.
func sameKey(p *Plan, si int, keys []*recordlog.KeyLogs) *recordlog.KeyLogs {
	for j := 0; j < si && j < len(keys); j++ {
		if keys[j] != nil && bytes.Equal(p.Key(&p.Sections[j]), p.Key(&p.Sections[si])) {
			return keys[j]
		}
	}
	return nil
}

// sectionLog returns the key of section si (looked up in src unless an
// earlier section, whose keys are keys, read it) and the section's log in
// it (emptyLog when either is missing).
func sectionLog(src KeySource, p *Plan, si int, keys []*recordlog.KeyLogs, now int64) (*recordlog.KeyLogs, *recordlog.SubLog) {
	k := sameKey(p, si, keys)
	if k == nil && !p.keySeen(si) {
		k = src.Lookup(p, si, now)
	}
	if k != nil {
		if found := k.Find(p.Sub(&p.Sections[si])); found != nil {
			return k, found
		}
	}
	return k, &emptyLog
}
