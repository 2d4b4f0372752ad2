package recordlogv2

import (
	"bytes"
)

// KeySlack (ms) keeps a key this long after its last record leaves every
// window: freqcap.lua's KEY_SLACK gives Redis keys the same TTL margin.
const KeySlack = 60_000

// KeyLogs is one key's sub-logs, decoded for one decision (memory store) or
// one batch decided in Go (Redis store).
type KeyLogs struct {
	Subs     []namedLog // a handful: a slice beats a map
	ExpireAt int64
}

// namedLog is a sub-log and its id. The id refers to bytes that outlive the
// decision that decoded it: the value it was decoded from, or the plan.
type namedLog struct {
	Id []byte
	SubLog
}

// Find returns the sub-log with the id, or nil.
func (k *KeyLogs) Find(sub []byte) *SubLog {
	for i := range k.Subs {
		if bytes.Equal(k.Subs[i].Id, sub) {
			return &k.Subs[i].SubLog
		}
	}
	return nil
}

// Sub returns the sub-log with the id, creating it.
func (k *KeyLogs) Sub(sub []byte) *SubLog {
	if l := k.Find(sub); l != nil {
		return l
	}
	k.Subs = k.grow()
	l := &k.Subs[len(k.Subs)-1]
	l.Id, l.Retention, l.floor = sub, 0, 0
	l.Entries, l.tombs = l.Entries[:0], l.tombs[:0]
	return &l.SubLog
}

// grow returns k.subs one longer, reusing the buffers of a dropped sub-log.
func (k *KeyLogs) grow() []namedLog {
	if len(k.Subs) < cap(k.Subs) {
		return k.Subs[:len(k.Subs)+1]
	}
	return append(k.Subs, namedLog{})
}

// Prune drops what no rule can need from every sub-log, and empty ones
// (swapped to the end, so their buffers are reused, never shared).
func (k *KeyLogs) Prune(now int64) {
	j := 0
	for i := range k.Subs {
		k.Subs[i].prune(now)
		if !k.Subs[i].empty() {
			if i != j {
				k.Subs[j], k.Subs[i] = k.Subs[i], k.Subs[j]
			}
			j++
		}
	}
	k.Subs = k.Subs[:j]
}

// RefreshExpiry sets when the key may go: its last record's retention, plus
// the slack the Redis store's TTL has too.
func (k *KeyLogs) RefreshExpiry() {
	var exp int64
	for i := range k.Subs {
		exp = max(exp, k.Subs[i].expiry())
	}
	k.ExpireAt = exp + KeySlack
}
