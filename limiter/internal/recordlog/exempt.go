package recordlog

import "bytes"

// This file is format 2 of a key's value: format 1 plus exempt marks, which say which records of a log were exempt sends (admitted past
// their rules by `exempt`, and counted as any). Counting never reads them.
//
// The marks of the log with id S are a sub-log of their own, in format 1's
// layout, with id AnnexByte, 'e', S: an annex. Its entries are the record
// times of S's exempt records and their exempt units, merged per grain as
// S's are. So a value of format 2 is a value of format 1: a gateway of the
// older version reads it, finds no rule whose id is an annex's, counts
// exactly what the newer one counts, and copies the annex as it copies any
// log it has no rule for (pruned at its retention). A value with no annex
// (a key that never saw an exempt send) is byte for byte the same in both.
// No rule's id can start with AnnexByte: ids start with a dimension name,
// '$' or nothing, and every byte below 0x21 of a value is escaped.
//
// What an older gateway does to a log without touching its annex leaves
// marks that no longer match a record: a refund (the record is gone, or
// its bucket holds fewer units) or a reset (every record is gone, the
// floor stays). ExemptUnits therefore gives a mark to a record only when
// the record is still there (its time, or in a bucketed log its bucket
// after the record before it), never more units than the record holds,
// and none at or before the floor. So in a log that keeps every record
// (grain 0) the exempt count is exact, less only the exempt sends an
// older gateway made (it marks none). In a bucketed log (a limit above
// 1,000) a refund leaves a bucket's mark as it is unless the refunded
// record is the mark's latest: the bucket may then show more exempt units
// than are left of them, never more than it holds. Counting is exact in
// every case: it never reads a mark.
//
// Format 3 (blob.go) keeps the annexes and changes only the layout of a
// sub-log, marked by flags bit 128, which readers of formats 1 and 2
// refuse: a gateway of the older versions cannot read a value this one
// has written, and answers an error rather than a count
// (docs/operations.md has the upgrade). Room for later layouts: a format 3
// shape's bit 64 is reserved, and refused by this version.

// AnnexByte starts the id of a sub-log that is not a record log but an
// annex of one; annexExempt follows for exempt marks.
const (
	AnnexByte   = 0x01
	annexExempt = 'e'
)

// AppendExemptID appends the id of the exempt marks of the log sub.
func AppendExemptID(dst, sub []byte) []byte {
	dst = append(dst, AnnexByte, annexExempt)
	return append(dst, sub...)
}

// IsAnnex reports whether a sub-log id names an annex, not a record log.
func IsAnnex(id []byte) bool { return len(id) > 0 && id[0] == AnnexByte }

// findExempt returns the exempt marks of the log sub, or nil.
func (k *KeyLogs) findExempt(sub []byte) *SubLog {
	for i := range k.Subs {
		id := k.Subs[i].Id
		if len(id) == len(sub)+2 && id[0] == AnnexByte && id[1] == annexExempt && bytes.Equal(id[2:], sub) {
			return &k.Subs[i].SubLog
		}
	}
	return nil
}

// MarkExempt marks the record just made at t in a log (of retention and
// grain) as cost exempt units; exemptID is the log's AppendExemptID, and
// must outlive the decision as the log's id does. It may grow k.Subs:
// pointers to k's sub-logs taken before are stale.
func (k *KeyLogs) MarkExempt(exemptID []byte, t, cost, retention, grain int64) {
	m := k.Sub(exemptID)
	m.Retention = retention
	// t is no earlier than any mark (marks are times the log recorded),
	// and in a bucketed log one its records share: the mark lands in t's
	// bucket, where a refund of the record finds it.
	m.Record(t, cost, grain)
}

// Refund takes back the record made at t in the log sub (see
// SubLog.Refund), and its exempt mark when it was the mark's record.
func (k *KeyLogs) Refund(sub []byte, t, cost, grain, now int64) bool {
	l := k.Find(sub)
	if l == nil || !l.Refund(t, cost, grain, now) {
		return false
	}
	if m := k.findExempt(sub); m != nil {
		for i := range m.Entries {
			if e := &m.Entries[i]; e.T == t {
				e.C -= min(cost, e.C)
				if e.C == 0 {
					m.Entries = append(m.Entries[:i], m.Entries[i+1:]...)
				}
				break
			}
		}
	}
	return true
}

// Forget forgets every record of the log sub (see SubLog.Forget) and its
// exempt marks, and reports whether k held the log.
func (k *KeyLogs) Forget(sub []byte) bool {
	l := k.Find(sub)
	if l == nil {
		return false
	}
	l.Forget()
	if m := k.findExempt(sub); m != nil {
		m.Entries = m.Entries[:0]
	}
	return true
}

// ForgetBefore forgets the records of the log sub at or before cut (see
// SubLog.ForgetBefore) and their exempt marks, and reports whether k held
// the log.
func (k *KeyLogs) ForgetBefore(sub []byte, cut int64) bool {
	l := k.Find(sub)
	if l == nil {
		return false
	}
	l.ForgetBefore(cut)
	if m := k.findExempt(sub); m != nil {
		floor := m.floor // the marks' own, as Forget leaves it
		m.ForgetBefore(cut)
		m.floor = floor
	}
	return true
}

// ExemptUnits appends to dst, for each entry of l (the log sub of k,
// whose records merge per grain), how many of its units were exempt. k
// may be nil (no key: no marks).
func (k *KeyLogs) ExemptUnits(dst []int64, sub []byte, l *SubLog, grain int64) []int64 {
	var marks []Entry
	if k != nil {
		if m := k.findExempt(sub); m != nil {
			marks = m.Entries
		}
	}
	g := max(grain, 1)
	j := 0
	prev := l.floor
	for _, e := range l.Entries {
		var sum int64
		for ; j < len(marks) && marks[j].T <= e.T; j++ {
			if m := marks[j]; m.T > prev && m.T/g == e.T/g {
				sum += m.C
			}
		}
		dst = append(dst, min(sum, e.C))
		prev = e.T
	}
	return dst
}
