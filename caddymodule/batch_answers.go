package caddymodule

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/caddyserver/caddy/v2"

	"github.com/freqcap/caddy-freqcap/internal/answer"
	"github.com/freqcap/caddy-freqcap/internal/jsonbatch"
	"github.com/freqcap/caddy-freqcap/limiter"
)

// batchProblem is the body of a refused batch: the problem of its worst
// denied entry (the one that frees up last), as a single send's denial
// reads, and every denied entry.
type batchProblem struct {
	problem
	Denied []deniedEntry `json:"denied"`
}

// deniedEntry is one denied recipient entry of a batch.
type deniedEntry struct {
	// Path is the entry's concrete path in the body ("3.to",
	// "notifications.0.tokens.2").
	Path string `json:"path"`
	// Value is the recipient, only with log_values (as in logs).
	Value      string `json:"value,omitempty"`
	Rule       string `json:"rule"`
	RetryAfter int64  `json:"retry_after"`
}

// worstDenied is the index of the denied entry that frees up last, or -1.
func worstDenied(ds []*limiter.Decision) int {
	worst := -1
	for i, d := range ds {
		if !d.Allowed && (worst < 0 || d.RetryAfter > ds[worst].RetryAfter) {
			worst = i
		}
	}
	return worst
}

// writeBatchDenial answers a refused batch, in the handler's style: the
// quota headers are set. Where the answer is one ticket per recipient
// (answer expo, splice expo), each denied recipient's ticket names its
// own rule, and each admitted one, not sent because the batch was
// refused (batch reject), the rule that refused the batch. gorush's
// answer (answer gorush) is such a list too: a failed-push log per token.
// The entries along went with a denied one (batch drop: the other topics
// of its condition): they are listed as denied by its rule.
func (h *Handler) writeBatchDenial(w http.ResponseWriter, r *http.Request, b *jsonbatch.Batch, reqs []limiter.Request, ds []*limiter.Decision, asked [][]int64, denied []int, along []jsonbatch.Along) error {
	worst := worstDenied(ds)
	if asked == nil {
		asked = make([][]int64, len(ds)) // under drop each entry stands alone
	}
	p := batchProblem{problem: newProblem(h.StatusCode, &reqs[worst], ds[worst], asked[worst])}
	if len(ds) > 1 {
		// A message of one entry (one FCM topic) is no batch to its
		// sender: its detail is the rule's alone.
		p.Detail = fmt.Sprintf("%d of %d entries denied; %s", len(denied)+len(along), len(ds), p.Detail)
	}
	p.Denied = make([]deniedEntry, 0, len(denied)+len(along))
	entries := make([]answer.DeniedEntry, 0, len(denied)+len(along))
	by := make(map[int]int, len(denied)+len(along)) // entry -> the denied entry whose answer it takes
	listed := make([]int, 0, len(denied)+len(along))
	for _, i := range denied {
		by[i] = i
		listed = append(listed, i)
	}
	for _, a := range along {
		by[a.Entry] = a.With
		listed = append(listed, a.Entry)
	}
	slices.Sort(listed) // body order
	for _, i := range listed {
		d := ds[by[i]]
		e := deniedEntry{Path: b.EntryPath(i), Rule: d.Results[d.Denier].Rule.Name, RetryAfter: retryAfter(d.RetryAfter)}
		if h.LogValues {
			e.Value = b.Entries[i].Text
		}
		p.Denied = append(p.Denied, e)
		entries = append(entries, answer.DeniedEntry{Path: e.Path, Message: newProblem(h.StatusCode, &reqs[by[i]], d, asked[by[i]]).Detail})
	}
	den := answer.Denial{
		Status: h.StatusCode, Rule: p.Rule, Limit: p.Limit, RetryAfter: p.RetryAfter,
		Message: p.Detail, Problem: p, Now: ds[worst].Now, Single: oneObject(b), Batch: b, Entries: entries,
	}
	if h.denyStyle.DenialIsTicket {
		den.Tickets = make([]jsonbatch.Capped, len(ds))
		for i, d := range ds {
			t := jsonbatch.Capped{Position: i, Rule: p.Rule, RetryAfter: int(p.RetryAfter)}
			if !d.Allowed {
				t.Rule, t.RetryAfter = d.Results[d.Denier].Rule.Name, int(retryAfter(d.RetryAfter))
			}
			den.Tickets[i] = t
		}
	}
	return h.denyStyle.Deny(w, r, &den)
}

// batchAsked is, for each check of each entry of a batch refused under
// reject, what the earlier entries admitted in the same log asked of it:
// the store counted them before the entry, as a batch's entries count one
// after another, but recorded none, so a wait frees none of them. A batch
// that asks a log more than its limit is admitted after no wait. One pass,
// in body order.
func batchAsked(reqs []limiter.Request, ds []*limiter.Decision) [][]int64 {
	type logKey struct {
		rule   *limiter.Rule
		values string
	}
	sums := map[logKey]int64{}
	asked := make([][]int64, len(reqs))
	for i := range reqs {
		asked[i] = make([]int64, len(reqs[i].Checks))
		for k := range reqs[i].Checks {
			c := &reqs[i].Checks[k]
			key := logKey{c.Rule, strings.Join(c.Values, "\x00")}
			asked[i][k] = sums[key]
			if ds[i].Allowed {
				sums[key] += c.Cost
			}
		}
	}
	return asked
}

// unrecorded is ds as recorded: a batch refused under reject recorded
// none of its entries, but the store decided each after the earlier ones
// it admitted (asked, see batchAsked), and an admitted entry's result
// counts its own cost too, so each result's used counts them and its
// remaining lacks them. The answer's quota fields say what is there: a
// probe's refused batch of 30, 50 and 30 under a limit of 100 said 20
// remained, where a send of 50 then passed.
func unrecorded(reqs []limiter.Request, ds []*limiter.Decision, asked [][]int64) []*limiter.Decision {
	out := make([]*limiter.Decision, len(ds))
	for i, d := range ds {
		c := *d
		c.Results = slices.Clone(d.Results)
		for k := range c.Results {
			gone := asked[i][k]
			if d.Allowed {
				gone += reqs[i].Checks[k].Cost
			}
			res := &c.Results[k]
			if gone == 0 || res.Rule.Quiet != nil {
				continue
			}
			res.Used = max(0, res.Used-gone)
			res.Remaining = max(0, res.Limit-res.Used) // none past the limit (exempt sends)
			if res.Used == 0 && !res.Rule.Window.IsCalendar() {
				res.Reset = 0 // nothing recorded: nothing frees up (a period still ends)
			}
		}
		out[i] = &c
	}
	return out
}

// batchView combines a batch's decisions for the quota headers: for each
// rule (in the order of the rules), the result of the entry with the
// least left (of equals, the one that frees up last); it is denied when
// any entry is, with the worst denied entry's wait.
func (h *Handler) batchView(ds []*limiter.Decision) *limiter.Decision {
	bc := h.batch
	slots := make([]limiter.Result, len(h.rules))
	have := make([]bool, len(h.rules))
	for _, d := range ds {
		k := 0
		for _, res := range d.Results {
			if k = h.ruleIndex(res.Rule, k); k < 0 {
				k = bc.rulePos[res.Rule] // not one of h.rules: not expected
			}
			if res.Waived {
				// An exempt entry, or a shadow rule: it refuses
				// nothing, so it says nothing of when to send again.
				k++
				continue
			}
			cur := &slots[k]
			if !have[k] || res.Remaining < cur.Remaining || (res.Remaining == cur.Remaining && res.Reset > cur.Reset) {
				*cur, have[k] = res, true
			}
			k++
		}
	}
	view := &limiter.Decision{Allowed: true, Denier: -1}
	if len(ds) > 0 {
		view.Now = ds[0].Now // the batch is decided as one step
	}
	for k := range slots {
		if have[k] {
			view.Results = append(view.Results, slots[k])
		}
	}
	if worst := worstDenied(ds); worst >= 0 {
		view.Allowed, view.RetryAfter = false, ds[worst].RetryAfter
	}
	return view
}

// setBatchPlaceholders sets the placeholders of a decided batch: the
// worst denied entry's rule and wait, and what the tightest rule has left
// over every entry.
func setBatchPlaceholders(repl *caddy.Replacer, view *limiter.Decision, ds []*limiter.Decision) {
	rule, retry := "", int64(0)
	if worst := worstDenied(ds); worst >= 0 {
		d := ds[worst]
		rule, retry = d.Results[d.Denier].Rule.Name, retryAfter(d.RetryAfter)
	}
	repl.Set("http.frequency_cap.rule", rule)
	repl.Set("http.frequency_cap.retry_after", retry)
	if len(view.Results) == 0 {
		repl.Set("http.frequency_cap.remaining", nil)
		return
	}
	repl.Set("http.frequency_cap.remaining", view.Results[tightest(view)].Remaining)
}

// oneObject reports whether b is one message, as an object, to one
// recipient not in an array ({"to": "x"}, not {"to": ["x"]}): Expo answers
// only that with one ticket object, and the rest with an array.
func oneObject(b *jsonbatch.Batch) bool {
	if !b.Single() || len(b.Entries) != 1 {
		return false
	}
	p := b.EntryPath(0)
	last := p[strings.LastIndexByte(p, '.')+1:]
	_, err := strconv.Atoi(last)
	return err != nil
}
