package limiter

import "bytes"

// keySlack (ms) keeps a key this long after its last record leaves every
// window: freqcap.lua's KEY_SLACK gives Redis keys the same TTL margin.
const keySlack = 60_000

// keyLogs is one key's sub-logs, decoded for one decision (memory store) or
// one batch decided in Go (Redis store).
type keyLogs struct {
	subs     []namedLog // a handful: a slice beats a map
	expireAt int64
}

// namedLog is a sub-log and its id. The id refers to bytes that outlive the
// decision that decoded it: the value it was decoded from, or the plan.
type namedLog struct {
	id []byte
	subLog
}

// find returns the sub-log with the id, or nil.
func (k *keyLogs) find(sub []byte) *subLog {
	for i := range k.subs {
		if bytes.Equal(k.subs[i].id, sub) {
			return &k.subs[i].subLog
		}
	}
	return nil
}

// sub returns the sub-log with the id, creating it.
func (k *keyLogs) sub(sub []byte) *subLog {
	if l := k.find(sub); l != nil {
		return l
	}
	k.subs = k.grow()
	l := &k.subs[len(k.subs)-1]
	l.id, l.retention, l.floor = sub, 0, 0
	l.entries, l.tombs = l.entries[:0], l.tombs[:0]
	return &l.subLog
}

// grow returns k.subs one longer, reusing the buffers of a dropped sub-log.
func (k *keyLogs) grow() []namedLog {
	if len(k.subs) < cap(k.subs) {
		return k.subs[:len(k.subs)+1]
	}
	return append(k.subs, namedLog{})
}

// prune drops what no rule can need from every sub-log, and empty ones
// (swapped to the end, so their buffers are reused, never shared).
func (k *keyLogs) prune(now int64) {
	j := 0
	for i := range k.subs {
		k.subs[i].prune(now)
		if !k.subs[i].empty() {
			if i != j {
				k.subs[j], k.subs[i] = k.subs[i], k.subs[j]
			}
			j++
		}
	}
	k.subs = k.subs[:j]
}

// refreshExpiry sets when the key may go: its last record's retention, plus
// the slack the Redis store's TTL has too.
func (k *keyLogs) refreshExpiry() {
	var exp int64
	for i := range k.subs {
		exp = max(exp, k.subs[i].expiry())
	}
	k.expireAt = exp + keySlack
}
