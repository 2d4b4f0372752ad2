package caddymodule

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"

	"github.com/freqcap/caddy-freqcap/caddymodule/internal/reply"
	"github.com/freqcap/caddy-freqcap/internal/bodycodec"
	"github.com/freqcap/caddy-freqcap/internal/jsonbatch"
	"github.com/freqcap/caddy-freqcap/limiter"
)

// serveBatch is ServeHTTP for a handler with a batch dimension, once the
// body is read: every recipient entry is one decision over every rule,
// all of them in one store call, and the batch is passed on whole,
// passed on without its denied entries (batch drop), or refused.
func (h *Handler) serveBatch(w http.ResponseWriter, r *http.Request, next *passOn, repl *caddy.Replacer, body *body) error {
	bc := h.batch
	b, err := bc.path.EnumerateMessages(body.json, bc.max)
	if err != nil {
		undecided(repl)
		f := &reply.Failure{Status: http.StatusBadRequest, Reason: "reading the batch: " + err.Error(), Dimension: h.dims[bc.dim].Name}
		if errors.Is(err, jsonbatch.ErrTooMany) {
			f.Status, f.Reason = http.StatusRequestEntityTooLarge, fmt.Sprintf("the batch has more than max_batch (%d) entries", bc.max)
		}
		return h.fail(w, r, f)
	}
	h.metrics.batchEntries.Observe(float64(len(b.Entries)))
	if len(b.Missing) > 0 || len(b.Entries) == 0 {
		h.metrics.missing[bc.dim].Inc()
		if h.rejectsMissing(bc.dim) {
			undecided(repl)
			name := h.dims[bc.dim].Name
			if len(b.Missing) == 0 {
				// Empty arrays all the way: the batch names no one.
				return h.fail(w, r, &reply.Failure{Status: http.StatusBadRequest, Reason: "missing value for dimension " + name + ": the batch names no recipient", Dimension: name})
			}
			return h.fail(w, r, missingEntry(name, h.dims[bc.dim].Expr, b.Missing[0]))
		}
	}
	if len(b.Entries) == 0 {
		// Under skip, a batch with no entry is one send without the
		// batch dimension (nor those read per entry), as a single send
		// without it: the rules that do not use them still count it.
		return h.serveOne(w, r, next, repl, true)
	}
	reqs, quiet, fail := h.batchRequests(repl, b)
	if fail != nil {
		undecided(repl)
		return h.fail(w, r, fail)
	}
	if !anyApplies(reqs, quiet) {
		undecided(repl)
		return next.ServeHTTP(w, r)
	}

	// Under dry_run nothing is refused, so each admitted entry is
	// recorded as a single dry-run send would be: BatchEach.
	mode := limiter.BatchAll
	if bc.drop || h.DryRun {
		mode = limiter.BatchEach
	}
	ds, err := h.decideBatch(r.Context(), reqs, quiet, mode)
	if err != nil {
		for i := range reqs {
			h.metrics.countFailure(&reqs[i])
		}
		h.warns.add(opDecide, err)
		if h.OnError == OnErrorDeny {
			undecided(repl)
			return h.fail(w, r, storeDown)
		}
		if !bc.drop || h.DryRun || quietRefused(reqs, quiet) == nil {
			undecided(repl)
			return next.ServeHTTP(w, r)
		}
		// The entries a quiet range refuses go whatever the store says
		// (under on_error allow the whole batch passed, quiet entries and
		// all); the rest pass as on_error allow passes them, uncounted.
		ds = h.undecidedBatch(reqs, quiet, make([]*limiter.Decision, len(reqs)))
	}

	var denied []int
	for i, d := range ds {
		if !d.Allowed {
			denied = append(denied, i)
		}
	}
	// Under drop, an admitted entry that shares its place with a denied
	// one goes with it (the other topics of one FCM condition): it is not
	// sent, so what it recorded is given back.
	var along []jsonbatch.Along
	var goesAlong []bool // by entry, when along is not empty
	if bc.drop && !h.DryRun && len(denied) > 0 {
		if along = b.AlongWith(denied); len(along) > 0 {
			goesAlong = make([]bool, len(ds))
			for _, a := range along {
				goesAlong[a.Entry] = true
			}
			h.unrecord(r, ds, along)
		}
	}
	// A batch is refused under reject when any entry is denied, under
	// drop when nothing is left to send (every entry denied or gone with
	// a denied one); never under dry_run.
	refused := !h.DryRun && len(denied) > 0 && (!bc.drop || len(denied)+len(along) == len(ds))
	if refused && !bc.drop {
		// Nothing, but where only quiet entries refused it and the
		// store admitted the others (see decideBatch).
		h.giveBackAll(r, ds)
	}
	tally := h.newBatchTally()
	for i, d := range ds {
		// The admitted entries of a refused batch recorded nothing, so
		// they count nothing, as a rule that would have admitted a
		// refused single send counts nothing; nor do those that went
		// with a denied one.
		if (!refused || !d.Allowed) && (goesAlong == nil || !goesAlong[i]) {
			tally.count(h, d, reqs[i].Exempt)
		}
		h.logShadows(&reqs[i], d)
	}
	tally.add(h)
	// A refused batch recorded nothing it asked: under reject nothing at
	// all, under drop what its admitted entries recorded was given back
	// (they went with denied ones). Its quota fields leave them out.
	var asked [][]int64 // under reject, what a refused batch's earlier entries asked
	shown := ds
	if refused {
		asked = batchAsked(reqs, ds)
		shown = unrecorded(reqs, ds, asked)
		if bc.drop {
			asked = nil // each entry stands alone: none waits on another
		}
	}
	view := h.batchView(shown)
	setBatchPlaceholders(repl, view, shown)
	setQuotaHeaders(w.Header(), view, stackQuota(r, view, !refused), h.style.ResetIsTime)
	if len(denied) > 0 {
		h.logBatchDenial(b, reqs, ds, denied)
	}
	if refused {
		return h.writeBatchDenial(w, r, b, reqs, shown, asked, denied, along) // shown: ds but for the quota fields
	}

	var ids []string // only refunds need them: most batches make none
	if len(h.refundOn) > 0 {
		ids = recordedIDs(ds)
	}
	var capped []jsonbatch.Capped
	if bc.drop && !h.DryRun && len(denied) > 0 {
		rm, err := b.Remove(denied)
		if err != nil {
			// Not expected: the batch was read from this very body.
			h.refundAll(r, recordedIDs(ds))
			return caddyhttp.Error(http.StatusInternalServerError, fmt.Errorf("frequency_cap %s: dropping denied entries: %w", h.Name, err))
		}
		out, err := bodycodec.Encode(body.coding, rm.Body)
		if err != nil {
			h.refundAll(r, recordedIDs(ds))
			return caddyhttp.Error(http.StatusInternalServerError, fmt.Errorf("frequency_cap %s: re-encoding the body: %w", h.Name, err))
		}
		replaceBody(r, out)
		setDropped(w.Header(), rm.Dropped)
		h.metrics.batchDropped.Add(float64(len(denied) + len(along)))
		if h.splicer != nil {
			capped = make([]jsonbatch.Capped, 0, len(denied)+len(along))
			for _, i := range denied {
				capped = append(capped, cappedEntry(i, ds[i]))
			}
			for _, a := range along {
				capped = append(capped, cappedEntry(a.Entry, ds[a.With])) // capped by its fellow's rule
			}
			slices.SortFunc(capped, func(x, y jsonbatch.Capped) int { return cmp.Compare(x.Position, y.Position) })
			// The answer is rewritten: ask for it uncompressed.
			r.Header.Del("Accept-Encoding")
		}
	}
	var splice func(status int, answer []byte) ([]byte, bool)
	if len(capped) > 0 {
		splice = func(status int, answer []byte) ([]byte, bool) {
			return h.splicer.Splice(status, answer, b, capped)
		}
	}
	return h.passBatch(w, r, next, ids, splice)
}

// perEntryDim reports whether dimension di is read per entry: the batch
// dimension, or one whose path or template follows the entries.
func (bc *batchConfig) perEntryDim(di int) bool {
	return di == bc.dim || bc.dims[di] != nil || bc.templates[di] != nil
}

// perEntryRule reports whether rule i reads its cost, limit or zone per
// entry: a batch with no entry has none to give it.
func (bc *batchConfig) perEntryRule(i int) bool {
	return bc.costs[i] != nil || bc.limits[i] != nil || bc.zones[i] != nil
}

// cappedEntry is entry i as a capped recipient, d being the denial that
// took it out.
func cappedEntry(i int, d *limiter.Decision) jsonbatch.Capped {
	return jsonbatch.Capped{Position: i, Rule: d.Results[d.Denier].Rule.Name, RetryAfter: int(retryAfter(d.RetryAfter))}
}

// unrecord gives back what the entries along recorded (giveBackAll).
func (h *Handler) unrecord(r *http.Request, ds []*limiter.Decision, along []jsonbatch.Along) {
	gone := make([]*limiter.Decision, 0, len(along))
	for _, a := range along {
		gone = append(gone, ds[a.Entry])
	}
	h.giveBackAll(r, gone)
}

// giveBackAll gives back what ds recorded, in one refund a store node,
// and forgets their admission ids, so that refund_on does not give them
// back twice. Not refunds: no upstream failed them, and decisions_total
// counted them as nothing (refunds_total would read them as sends
// refund_on gave back). A give-back that fails leaves them counted: an
// error towards denying, logged by giveBack.
func (h *Handler) giveBackAll(r *http.Request, ds []*limiter.Decision) {
	if ids := recordedIDs(ds); len(ids) > 0 {
		for _, id := range limiter.JoinIDs(ids) {
			h.giveBack(r, id)
		}
		limiter.ForgetIDs(ds)
	}
}

// recordedIDs returns the admission ids of the decisions that recorded.
func recordedIDs(ds []*limiter.Decision) []string {
	var ids []string
	for _, d := range ds {
		if d.Recorded() {
			ids = append(ids, d.ID())
		}
	}
	return ids
}

// anyApplies reports whether some entry has a rule to decide.
func anyApplies(reqs []limiter.Request, quiet [][]quietHit) bool {
	for i := range reqs {
		if len(reqs[i].Checks) > 0 || (quiet != nil && len(quiet[i]) > 0) {
			return true
		}
	}
	return false
}

// replaceBody makes body the request's body, with its length, and
// without the sender's digests of the body it replaces.
func replaceBody(r *http.Request, body []byte) {
	r.Body = replayBody{Reader: bytes.NewReader(body), Closer: r.Body}
	r.ContentLength = int64(len(body))
	r.TransferEncoding = nil
	r.Header.Set("Content-Length", strconv.Itoa(len(body)))
	dropDigests(r.Header)
}

// bodyDigests are the fields that hash a message's body (RFC 1864's
// Content-MD5, RFC 3230's Digest, RFC 9530's Content-Digest and
// Repr-Digest): a body rewritten makes them false, and a reader that
// checks one would refuse it. Nothing could sign the new body for the
// sender, so they go.
var bodyDigests = [...]string{"Content-Md5", "Digest", "Content-Digest", "Repr-Digest"}

// dropDigests removes h's digests of its body (see bodyDigests).
func dropDigests(h http.Header) {
	for _, k := range bodyDigests {
		delete(h, k)
	}
}

// passBatch passes an admitted batch on. It refunds every admitted entry
// (ids) when the response status matches refund_on or there is none, and,
// when splice is set (entries were dropped and the style reports them in
// the upstream's answer), rewrites the answer with it.
func (h *Handler) passBatch(w http.ResponseWriter, r *http.Request, next *passOn, ids []string, splice func(status int, answer []byte) ([]byte, bool)) error {
	if splice == nil && (len(h.refundOn) == 0 || len(ids) == 0) {
		return next.ServeHTTP(w, r)
	}
	var status int
	var err error
	refunds := len(h.refundOn) > 0 && len(ids) > 0
	var own http.Header
	if refunds {
		own = ownQuota(w.Header())
	}
	if splice != nil {
		sw := &spliceWriter{ResponseWriter: w}
		if refunds {
			sw.refunded, sw.own = h.refunds, own
			defer h.refundIfAborted(next, func() int { return sw.status }, func() { h.refundAll(r, ids) })
		}
		err = next.ServeHTTP(sw, r)
		status = sw.status
		switch {
		case err != nil && !sw.passing:
			// The upstream failed, perhaps halfway through its answer:
			// what was held is dropped, so that a cut answer never goes
			// out as a whole one, and Caddy answers the error (no
			// failure to splice: there was no answer).
		case status == 0:
			// No answer at all is Caddy's to give.
		case sw.finish(r.Method, splice):
			h.metrics.spliceFailures.Inc()
		}
	} else {
		rec := newStatusRecorder(w, nil)
		if refunds {
			rec.refunded, rec.own = h.refunds, own
			defer h.refundIfAborted(next, func() int { return rec.status }, func() { h.refundAll(r, ids) })
		}
		err = next.ServeHTTP(rec, r)
		status = rec.status
	}
	if status == 0 && err == nil {
		status = http.StatusOK
	}
	if len(h.refundOn) > 0 && (err != nil || matchesAny(h.refundOn, status)) && !next.cut {
		if refunds && err != nil && status == 0 {
			// Caddy answers the error on w, its quota fields still on.
			dropOwnQuota(w.Header(), own)
		}
		h.refundAll(r, ids)
	}
	return err
}

// refundAll gives back every admission of a batch, joined into one refund
// (two when some were decided in the local fallback store): one round trip
// per Redis node, not one per entry. The refunds metric counts each
// admission of a refund that gave anything back.
func (h *Handler) refundAll(r *http.Request, ids []string) {
	for _, id := range limiter.JoinIDs(ids) {
		h.refundCounting(r, id, len(ids))
	}
}
