package limiter

import (
	"time"

	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"
)

// This file turns a plan's answers into a Decision, allocated in one piece
// with its results and its admission id.

// Finish turns p.raw (per rule, in p.rules order) into a Decision.
func (p *Plan) Finish(req *Request, now int64, admitted bool) *Decision {
	return p.FinishFrom(nil, req, now, admitted)
}

// FinishFrom is finish with the Decision taken from slab (nil: allocated
// apart).
func (p *Plan) FinishFrom(slab *DecisionSlab, req *Request, now int64, admitted bool) *Decision {
	d, idRoom := slab.next(len(req.Checks))
	d.Allowed, d.Denier, d.Now = admitted, -1, time.UnixMilli(now)
	for k := range p.Rules {
		pr := &p.Rules[k] // not a copy: a rule's calendar bounds make it 80 bytes
		res := &d.Results[pr.check]
		res.Rule = req.Checks[pr.check].Rule
		pr.answer(res, p.Raw[k], &p.Sections[p.checkSec[pr.check]])
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

// decisionBox is a Decision allocated in one piece with its results (up to
// four: the seed config's) and room for its admission id.
type decisionBox struct {
	d   Decision
	res [4]Result
	id  [idBytes]byte
}

// newDecision allocates a Decision, its results and room for its admission
// id together: one allocation for up to eight rules.
func newDecision(n int) (*Decision, []byte) {
	if n <= 4 {
		box := &decisionBox{}
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

// DecisionSlab hands out the decisions of a batch from one allocation
// instead of one each.
type DecisionSlab struct{ boxes []decisionBox }

func NewDecisionSlab(n int) *DecisionSlab { return &DecisionSlab{boxes: make([]decisionBox, n)} }

// next is newDecision, from the slab while it lasts (a nil slab
// allocates).
func (s *DecisionSlab) next(n int) (*Decision, []byte) {
	if s == nil || n > 4 || len(s.boxes) == 0 {
		return newDecision(n)
	}
	box := &s.boxes[0]
	s.boxes = s.boxes[1:]
	box.d.Results = box.res[:n:n]
	return &box.d, box.id[:0]
}

// appendID appends the admission id of what p recorded (see encodeID).
func (p *Plan) appendID(dst []byte) []byte {
	for si := range p.Sections {
		s := &p.Sections[si]
		if s.Recorded > 0 {
			dst = recordlog.AppendRecord(dst, p.Key(s), p.Sub(s), s.Grain, s.Recorded, s.Cost)
		}
	}
	return dst
}
