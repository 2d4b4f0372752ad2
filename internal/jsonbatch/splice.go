package jsonbatch

import (
	"encoding/json"
	"strconv"
)

// Capped is a recipient that a cap removed from an Expo request: its
// position among the request's recipients (its index in Batch.Entries,
// which is Expo's order: messages in order, "to" arrays flattened), the
// rule that denied it and when it may be sent again.
type Capped struct {
	Position   int
	Rule       string
	RetryAfter int // seconds
}

// SpliceExpo makes Expo's positional answer whole again after capped
// recipients were removed from the request ("splice expo").
// total is the number of recipients the sender sent, capped ones included.
// If status is 2xx and answer is a valid JSON object (see Valid) whose
// "data" member is an array of exactly total-len(capped) tickets,
// SpliceExpo returns the answer with, at each capped position, the ticket
//
//	{"status":"error","message":"frequency cap <rule>: retry in <n> s",
//	 "details":{"error":"MessageRateExceeded","rule":"<rule>","retry_after":<n>}}
//
// so the sender gets one ticket per recipient, in order, and ok = true.
// The upstream's tickets and every byte outside the "data" array are kept
// as written; inside it, tickets are joined by a bare comma (the
// whitespace between them goes). With nothing capped, the answer is
// returned as it is. Anything
// else (another status, another shape, another count, or capped
// positions that repeat or fall outside [0, total)) returns answer
// unchanged and ok = false, for the caller to pass on and count.
func SpliceExpo(status int, answer []byte, total int, capped []Capped) (out []byte, ok bool) {
	if status < 200 || status > 299 || len(capped) > total || Valid(answer) != nil {
		return answer, false
	}
	at := make(map[int]*Capped, len(capped))
	for i := range capped {
		c := &capped[i]
		if c.Position < 0 || c.Position >= total || at[c.Position] != nil {
			return answer, false
		}
		at[c.Position] = c
	}
	root := skipSpace(answer, 0)
	if answer[root] != '{' {
		return answer, false
	}
	data, found := member(answer, root, "data")
	if !found || answer[data] != '[' {
		return answer, false
	}
	var tickets []span
	it := iterate(answer, data)
	for {
		_, s, e, more := it.next()
		if !more {
			break
		}
		tickets = append(tickets, span{s, e})
	}
	if len(tickets) != total-len(capped) {
		return answer, false
	}
	if len(capped) == 0 {
		return answer, true
	}
	out = make([]byte, 0, len(answer)+len(capped)*160)
	out = append(out, answer[:data+1]...)
	for p, next := 0, 0; p < total; p++ {
		if p > 0 {
			out = append(out, ',')
		}
		if c := at[p]; c != nil {
			out = AppendCapTicket(out, c)
			continue
		}
		out = append(out, answer[tickets[next].start:tickets[next].end]...)
		next++
	}
	return append(out, answer[it.pos:]...), true
}

// AppendCapTicket appends the Expo error ticket for c (see SpliceExpo):
// the one place its shape is written, for spliced answers and for the
// all-capped answers the gateway gives itself.
func AppendCapTicket(dst []byte, c *Capped) []byte {
	n := strconv.Itoa(c.RetryAfter)
	dst = append(dst, `{"status":"error","message":`...)
	dst = appendQuoted(dst, "frequency cap "+c.Rule+": retry in "+n+" s")
	dst = append(dst, `,"details":{"error":"MessageRateExceeded","rule":`...)
	dst = appendQuoted(dst, c.Rule)
	dst = append(dst, `,"retry_after":`...)
	dst = append(dst, n...)
	return append(dst, "}}"...)
}

// appendQuoted appends s as a JSON string.
func appendQuoted(dst []byte, s string) []byte {
	q, _ := json.Marshal(s) // a string always marshals
	return append(dst, q...)
}
