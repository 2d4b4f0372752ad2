// Package lease serves large shared budgets without sending every decision
// to the store: a Store wrapper that leases blocks of a rule's budget to
// this gateway and admits from them locally.
//
// A rule opts in with limiter.Rule.Lease, the block size. The first
// request that finds no units in hand takes a block: it decides the leased
// check alone on the inner store with the block as its cost (less near
// the limit: never more than the store said remains, never less than the
// request's cost). Later requests take their units from the block without
// a store round trip, until it is spent or its term ends; their other
// checks (a recipient's caps) are decided on the inner store as usual, and
// a denial there puts the units back. At the end of its term, and on
// Close, a block's unspent units are given back to the store. So a budget
// that every request shares (a campaign's coupons) costs the store one
// decision a block instead of one a request.
//
// # Exactness
//
// A block is recorded at the store's time D of its decision and spent only
// in [D, D+term) by the store's clock: the term is measured on the
// gateway's clock from just before the call, so it ends no later.
//
//   - Calendar periods: a term never passes the end of D's period, and a
//     block whose record landed in the next period (a record moved 1 ms
//     past the newest at a period's last millisecond) is not spent. Every
//     unit spent in a period was counted in it when its block was decided.
//   - Rolling windows: a send at s counts until s+W, but its block's record
//     leaves the window at D+W. So every decision on a leased log (blocks,
//     and the requests decided whole, see below) counts the window a
//     hundredth longer, W+E with E = W/100, and a term is at most E. Take
//     any window (x-W, x] and, of the blocks and records whose sends fall
//     in it, the one the store decided last, at D* <= x. Every other one was
//     in the log by then, recorded at or after its decision's time D, where
//     D > s-E > x-W-E >= D*-W-E for each of its sends s, so the last
//     decision counted it; the store admitted it only with the sum within
//     the limit. The records are kept that long too (a log's
//     retention follows its longest window).
//
// Refunds take back only what was not spent, so no record ever covers
// less than its sends. Every gateway that decides a leased log must lease
// it (counting W+E); the margin E is fixed by the window, not configured,
// so gateways with different terms still agree.
//
// # What it costs
//
// Units leased and not yet spent count as used in the store: at any moment
// at most (gateways × block) units per leased key, held for at most one
// term plus Options.Sweep, plus, for weighted rules, less than one
// request's cost for each block set aside short within its term (a block
// gives back once, at its term's end). A rolling rule also counts a
// block's units from its decision until W+E after it, up to E longer than
// its sends need: like a bucket of a bucketed log, towards denying. Both
// make a leased budget under-admit, never over-admit. A single send that
// a leased rule denies on the store while this gateway holds units of that
// key unspent (a cost larger than the block in hand) has them given back
// and is decided once more, so a gateway does not refuse such a send for
// its own lease; only other gateways' blocks can. Its blocks stay open
// (what sends in flight put back is spent again in the term), but a block
// gives back once, so what is put back after that stays counted until its
// record leaves the window. A batch send's entries are not decided again.
//
// # What it serves
//
// Leased checks are served locally when the request is not exempt, the
// check is not a shadow, its cost is positive, it has no per-request limit
// (Check.Limit) and no Sub, and no other check of the request reads the
// same log. Any other request that has a leased check is decided whole on
// the inner store, with the leased rules' windows counted as above: exact,
// at a store round trip. So is a request when the store would not lease
// its cost (its last answer said less remains, or it denied the block):
// the answer, a denial usually, is then the store's, with its exact retry
// time. Usage is answered by the inner store with the rules as they are:
// units leased and not spent count as used until they are given back.
// Reset forgets in the inner store, but in a leased log only the records
// older than a term (Request.Keep): a block of the last term may be
// another gateway's, still being spent, and only its record counts those
// sends. This gateway's own blocks on the logs reset are dropped and given
// back whole, their spent units too.
//
// # Admission ids
//
// A decision's id lists the inner store's records and, for each leased
// check, a record of its own (a key without braces, which every store key
// has) naming the block and the units. A refund gives the units back to
// their block until its term ends; the block then gives them back to the
// store with its unspent units, in one refund of its record carrying the
// smaller cost (the stores refund part of a bucketed record). The store
// refunds a record once, so a refund that arrives after its block gave
// back reports false, and its units stay counted until they leave the
// window: towards denying. JoinIDs joins such ids as any.
//
// A lease recorded on a Redis master that fails over before the record
// replicated is lost like any other record: the units it covers may be
// admitted again, as documented for every record.
package lease
