package limiter

import "time"

// This file turns a plan's answers into a Decision, allocated in one piece
// with its results and its admission id.

// finish turns p.raw (per rule, in p.rules order) into a Decision.
func (p *plan) finish(req *Request, now int64, admitted bool) *Decision {
	d, idRoom := newDecision(len(req.Checks))
	d.Allowed, d.Denier, d.Now = admitted, -1, time.UnixMilli(now)
	for k, pr := range p.rules {
		res := &d.Results[pr.check]
		res.Rule = req.Checks[pr.check].Rule
		pr.answer(res, p.raw[k], &p.sections[p.checkSec[pr.check]])
	}
	for i := range d.Results {
		if d.Results[i].Denied && !d.Results[i].Waived && (d.Denier < 0 || d.Results[i].RetryAfter > d.RetryAfter) {
			d.Denier, d.RetryAfter = i, d.Results[i].RetryAfter
		}
	}
	if admitted {
		d.id = p.appendID(idRoom)
	}
	return d
}

// idBytes is the room for the admission id allocated with a decision: the
// seed config's id is about 110 bytes; a longer one is allocated apart.
const idBytes = 128

// newDecision allocates a Decision, its results and room for its admission
// id together: one allocation for up to eight rules.
func newDecision(n int) (*Decision, []byte) {
	if n <= 4 {
		box := &struct {
			d   Decision
			res [4]Result
			id  [idBytes]byte
		}{}
		box.d.Results = box.res[:n:n]
		return &box.d, box.id[:0]
	}
	if n <= 8 {
		box := &struct {
			d   Decision
			res [8]Result
			id  [idBytes]byte
		}{}
		box.d.Results = box.res[:n:n]
		return &box.d, box.id[:0]
	}
	return &Decision{Results: make([]Result, n)}, nil
}

// appendID appends the admission id of what p recorded (see encodeID).
func (p *plan) appendID(dst []byte) []byte {
	for si := range p.sections {
		s := &p.sections[si]
		if s.recorded > 0 {
			dst = appendRecord(dst, p.key(s), p.sub(s), s.grain, s.recorded, s.cost)
		}
	}
	return dst
}
