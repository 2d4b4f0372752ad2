package caddymodule

import (
	"github.com/freqcap/caddy-freqcap/limiter"
)

// A batch's decisions are counted in the metrics per rule and outcome,
// then added once per batch: counting each entry's results as a single
// send's are (a map lookup and an atomic add each) cost a batch of 500
// entries 1,500 of each.

// batchTally counts a batch's decisions by rule (index of Handler.rules)
// and outcome, as countDecision would count them one by one.
type batchTally [][outcomes]int

func (h *Handler) newBatchTally() batchTally { return make(batchTally, len(h.rules)) }

// count counts decision d of an entry, exempt or not.
func (t batchTally) count(h *Handler, d *limiter.Decision, exempt bool) {
	k := 0
	for i := range d.Results {
		res := &d.Results[i]
		o := outcomeOf(res, d.Allowed, h.DryRun, exempt)
		if o == noOutcome {
			continue
		}
		if k = h.ruleIndex(res.Rule, k); k < 0 {
			h.metrics.rules[res.Rule].counter(o).Inc() // not one of h.rules: not expected
			k = 0
			continue
		}
		t[k][o]++
		k++
	}
}

// add adds the counts to the metrics.
func (t batchTally) add(h *Handler) {
	for k, row := range t {
		for o, n := range row {
			if n > 0 {
				h.metrics.rules[h.rules[k].rule].counter(o).Add(float64(n))
			}
		}
	}
}

// ruleIndex returns the index of rule r in h.rules, or -1, looking from
// guess on: the results of a decision come in the order of the rules (but
// for those an entry left out, and the quiet ones, last), so the rule
// after the last one found is usually the next one.
func (h *Handler) ruleIndex(r *limiter.Rule, guess int) int {
	n := len(h.rules)
	for k := range n {
		i := guess + k
		if i >= n {
			i -= n
		}
		if h.rules[i].rule == r {
			return i
		}
	}
	return -1
}
