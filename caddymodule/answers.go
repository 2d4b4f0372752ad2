package caddymodule

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/freqcap/caddy-freqcap/caddymodule/internal/reply"
	"github.com/freqcap/caddy-freqcap/internal/answer"
	"github.com/freqcap/caddy-freqcap/internal/bodycodec"
	"github.com/freqcap/caddy-freqcap/internal/jsonbatch"
	"github.com/freqcap/caddy-freqcap/limiter"
)

// ProblemType is the "type" of a denial's problem+json body (RFC 9457).
const ProblemType = "https://github.com/freqcap/caddy-freqcap#rate-limited"

// problem is the body of a denial.
type problem struct {
	Type       string     `json:"type"`
	Title      string     `json:"title"`
	Status     int        `json:"status"`
	Detail     string     `json:"detail"`
	Rule       string     `json:"rule"`
	Limit      int64      `json:"limit"`
	Window     string     `json:"window"`
	RetryAfter int64      `json:"retry_after"`
	Violated   []violated `json:"violated"`
}

// violated is one rule that refused the request.
type violated struct {
	Rule       string `json:"rule"`
	Limit      int64  `json:"limit"`
	Used       int64  `json:"used"`
	Remaining  int64  `json:"remaining"`
	Window     string `json:"window"`
	RetryAfter int64  `json:"retry_after"`
}

// storeDown is the answer under on_error deny.
var storeDown = &reply.Failure{Status: http.StatusServiceUnavailable, Reason: "frequency cap store unavailable"}

// provisionAnswer finds the answer style and fills in the status of a
// denial, which only the problem style takes from status_code.
func (h *Handler) provisionAnswer() error {
	if h.Answer == "" {
		h.Answer = answer.Default
	}
	style, ok := answer.Lookup(h.Answer)
	if !ok {
		return fmt.Errorf("answer must be one of %s, not %q", strings.Join(answer.Names(), ", "), h.Answer)
	}
	if h.Answer != answer.Default && h.StatusCode != 0 {
		return fmt.Errorf("status_code applies to answer %s only: answer %s denies with its provider's own status", answer.Default, h.Answer)
	}
	if h.StatusCode == 0 {
		h.StatusCode = DefaultStatusCode
	}
	h.style, h.denyStyle = style, style
	if h.Answer == SpliceExpo && h.Batch == BatchDrop {
		// Expo matches tickets to recipients by position: what batch
		// drop removed must be put back, as splice expo does.
		h.Splice = SpliceExpo
	}
	if h.Splice == SpliceExpo {
		if err := spliceClash(h.Answer, h.Splice); err != nil {
			return err
		}
		h.denyStyle, _ = answer.Lookup("expo")
	}
	if h.Batch == BatchDrop && h.denyStyle.Splices() {
		// A recipient the provider's SDK sent must be accounted for
		// in the answer, as the provider accounts for one it refused:
		// what batch drop removed is reported in the upstream's
		// answer, and a batch wholly capped is answered so too.
		h.splicer = h.denyStyle
	}
	return nil
}

// spliceClash refuses splice expo beside another style that reports
// dropped recipients in its own provider's answer (answer gorush): the
// sender's SDK would get Expo's tickets for a batch of its own kind.
func spliceClash(style, splice string) error {
	s, ok := answer.Lookup(style)
	if splice == "" || style == splice || !ok || !s.Splices() {
		return nil
	}
	return fmt.Errorf("splice %s does not go with answer %s, which reports dropped recipients in its own provider's answer", splice, style)
}

// fail answers a request the handler could not decide, in its style.
func (h *Handler) fail(w http.ResponseWriter, r *http.Request, f *reply.Failure) error {
	return h.style.Fail(w, r, &answer.Failure{Status: f.Status, Reason: f.Reason, Dimension: f.Dimension, Rule: f.Rule}, bodycodec.Accepted)
}

// writeDenial answers a denied single send, in the handler's style: the
// quota headers are already set.
func (h *Handler) writeDenial(w http.ResponseWriter, r *http.Request, req *limiter.Request, d *limiter.Decision) error {
	p := newProblem(h.StatusCode, req, d, nil)
	return h.denyStyle.Deny(w, r, &answer.Denial{
		Status: h.StatusCode, Rule: p.Rule, Limit: p.Limit, RetryAfter: p.RetryAfter,
		Message: p.Detail, Problem: p, Now: d.Now, Single: true,
		Tickets: []jsonbatch.Capped{{Rule: p.Rule, RetryAfter: int(p.RetryAfter)}},
	})
}

// newProblem is the body of a denial of req by d. asked, when not nil,
// is what the request asks of each check's log beyond its own cost: a
// refused batch's earlier entries in the same log, counted when the
// store decided but never recorded (see batchAsked).
func newProblem(status int, req *limiter.Request, d *limiter.Decision, asked []int64) problem {
	den := d.Results[d.Denier]
	retry := retryAfter(d.RetryAfter)
	p := problem{
		Type:       ProblemType,
		Title:      http.StatusText(status),
		Status:     status,
		Rule:       den.Rule.Name,
		Limit:      den.Limit,
		Window:     reply.Window(&req.Checks[d.Denier]),
		RetryAfter: retry,
	}
	never, more := -1, int64(0) // a denying rule whose limit is below what the send asks of it
	for i, res := range d.Results {
		if i < len(asked) {
			more = asked[i]
		}
		if res.Denied && !res.Waived && res.Rule.Quiet == nil && req.Checks[i].Cost+more > ownLimit(&req.Checks[i]) {
			never = i
			break
		}
	}
	switch {
	case never >= 0 && more > 0:
		c := &req.Checks[never]
		p.Detail = fmt.Sprintf("rule %s allows %d per %s, and this batch asks %d of it for one recipient: no wait admits it", c.Rule.Name, ownLimit(c), reply.Window(c), c.Cost+more)
	case never >= 0:
		// No wait admits it: Retry-After is only when the rules have
		// their whole limits again.
		res := d.Results[never]
		p.Detail = fmt.Sprintf("rule %s allows %d per %s, and this send costs %d: no wait admits it", res.Rule.Name, res.Limit, reply.Window(&req.Checks[never]), req.Checks[never].Cost)
	case den.Rule.Quiet != nil:
		p.Detail = fmt.Sprintf("rule %s: %s; retry in %d s", p.Rule, p.Window, retry)
	default:
		p.Detail = fmt.Sprintf("rule %s allows %d per %s; retry in %d s", p.Rule, p.Limit, p.Window, retry)
	}
	for i, res := range d.Results {
		if !res.Denied || res.Waived {
			continue
		}
		p.Violated = append(p.Violated, violated{
			Rule:       res.Rule.Name,
			Limit:      res.Limit,
			Used:       res.Used,
			Remaining:  res.Remaining,
			Window:     reply.Window(&req.Checks[i]),
			RetryAfter: retryAfter(res.RetryAfter),
		})
	}
	return p
}

// setQuotaHeaders sets the fields of draft-ietf-httpapi-ratelimit-headers-10
// for every rule that could refuse the request, and the X-RateLimit-*
// fields of the tightest of them. A rule that could not (a shadow rule,
// and every rule of an exempt request) is left out: the fields tell a
// client when it may send again, and a rule that cannot refuse the send
// must not make a client that obeys them wait. A quiet rule is among
// them only while its range holds the request, and then it refuses.
//
// resetIsTime writes X-RateLimit-Reset as the Unix time of the reset (the
// decision's time plus the wait) for a provider that writes it so
// (answer.Style.ResetIsTime).
//
// before are the decisions of the cap sets that passed the request on
// before this one, given when this one passes it on too (see
// stackedResults): their rules are listed first.
func setQuotaHeaders(h http.Header, d *limiter.Decision, before []*limiter.Decision, resetIsTime bool) {
	results := stackedResults(d, before)
	if len(results) == 0 {
		return
	}
	// This runs on every request: append all five values into one buffer
	// rather than format, make one string and one backing array of them,
	// and use the canonical header keys so Set need not fix them.
	var stack [512]byte
	buf := stack[:0]
	var end [5]int
	for i, res := range results {
		buf = appendItem(buf, i, res.Rule.Name, ";q=", res.Limit, ";w=", res.Rule.Window.Seconds())
	}
	end[0] = len(buf)
	for i, res := range results {
		buf = appendItem(buf, i, res.Rule.Name, ";r=", res.Remaining, ";t=", reply.CeilSeconds(freesUpIn(&res)))
	}
	end[1] = len(buf)
	t := results[tightestOf(results)]
	reset := reply.CeilSeconds(freesUpIn(&t))
	if resetIsTime {
		reset += d.Now.Unix()
	}
	for i, v := range [3]int64{t.Limit, t.Remaining, reset} {
		buf = strconv.AppendInt(buf, v, 10)
		end[2+i] = len(buf)
	}
	all := string(buf)
	var vals [5]string
	start := 0
	for i, e := range end {
		vals[i], start = all[start:e], e
	}
	values := vals[:] // one array for the five headers' slices
	h["Ratelimit-Policy"] = values[0:1:1]
	h["Ratelimit"] = values[1:2:2]
	h["X-Ratelimit-Limit"] = values[2:3:3]
	h["X-Ratelimit-Remaining"] = values[3:4:4]
	h["X-Ratelimit-Reset"] = values[4:5:5]
}

// quotaFields are the fields setQuotaHeaders sets, canonical.
var quotaFields = [...]string{"Ratelimit-Policy", "Ratelimit", "X-Ratelimit-Limit", "X-Ratelimit-Remaining", "X-Ratelimit-Reset"}

// ownQuota is a copy of the quota fields h holds, before the upstream
// answers: the gateway's own (see setQuotaHeaders).
func ownQuota(h http.Header) http.Header {
	own := http.Header{}
	for _, k := range quotaFields {
		if vs := h[k]; len(vs) > 0 {
			own[k] = slices.Clone(vs)
		}
	}
	return own
}

// dropOwnQuota takes the gateway's own quota fields (own, see ownQuota)
// off an answer, and leaves the ones the upstream added: a provider's
// X-RateLimit-Reset on its 429 is its word, not the gateway's.
func dropOwnQuota(h, own http.Header) {
	for k, mine := range own {
		mine = slices.Clone(mine) // each of ours taken off once
		kept := h[k][:0:0]
		for _, v := range h[k] {
			if i := slices.Index(mine, v); i >= 0 {
				mine = slices.Delete(mine, i, i+1)
				continue
			}
			kept = append(kept, v)
		}
		if len(kept) == 0 {
			delete(h, k)
		} else {
			h[k] = kept
		}
	}
}

// enforced returns the results of the rules that could refuse the
// request (not Waived): results itself when that is all of them, as it
// nearly always is.
func enforced(results []limiter.Result) []limiter.Result {
	for i := range results {
		if !results[i].Waived {
			continue
		}
		kept := make([]limiter.Result, 0, len(results)-1)
		kept = append(kept, results[:i]...)
		for _, res := range results[i+1:] {
			if !res.Waived {
				kept = append(kept, res)
			}
		}
		return kept
	}
	return results
}

// appendItem appends the i-th member of a structured-field list: the rule
// name as a string (rule names need no escaping) and two integer
// parameters.
func appendItem(buf []byte, i int, name, k1 string, v1 int64, k2 string, v2 int64) []byte {
	if i > 0 {
		buf = append(buf, ", "...)
	}
	buf = append(buf, '"')
	buf = append(buf, name...)
	buf = append(buf, '"')
	buf = append(buf, k1...)
	buf = strconv.AppendInt(buf, v1, 10)
	buf = append(buf, k2...)
	return strconv.AppendInt(buf, v2, 10)
}

// tightest is the index of the rule with the least remaining; of equals,
// the one that frees up last in the whole seconds the headers give, and
// of those the first: a tie broken on milliseconds no header shows named
// one rule or another by when the request came (a dry run and its live
// twin, fed the same sends, named different rules).
func tightest(d *limiter.Decision) int { return tightestOf(d.Results) }

func tightestOf(results []limiter.Result) int {
	tight := 0
	for i, res := range results {
		t := results[tight]
		if res.Remaining < t.Remaining || (res.Remaining == t.Remaining && reply.CeilSeconds(freesUpIn(&res)) > reply.CeilSeconds(freesUpIn(&t))) {
			tight = i
		}
	}
	return tight
}

// freesUpIn is when a rule's quota fields say it frees up (t, and
// X-RateLimit-Reset): Reset, when its oldest record leaves, but for a rule
// that refused the request, when it would admit the request's cost
// (RetryAfter, as Retry-After says), which is later where the rule counts
// more than its limit (exempt sends past it, a per-request limit lowered)
// or the cost is more than one: a client that obeyed t was refused again.
func freesUpIn(res *limiter.Result) time.Duration {
	if res.Denied && !res.Waived && res.RetryAfter > res.Reset {
		return res.RetryAfter
	}
	return res.Reset
}

// retryAfter is a Retry-After value: whole seconds, rounded up, at least 1.
func retryAfter(d time.Duration) int64 { return max(1, reply.CeilSeconds(d)) }

// ownLimit is the limit a check is held to in the shared store: its rule's,
// or its per-request one when lower. A decision of the local fallback
// (on_error local) reports a share of it, which a send may pass and still
// fit once Redis answers: only a cost above this one is never admitted.
func ownLimit(c *limiter.Check) int64 {
	if c.Limit > 0 {
		return min(c.Limit, c.Rule.Limit)
	}
	return c.Rule.Limit
}
