package limiter

import (
	"context"
	"errors"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"
)

// Check applies one rule to one request.
type Check struct {
	Rule *Rule
	// Values are the request's values of Rule.By, in the same order.
	Values []string
	// Cost is how many units this request takes (0 counts nothing and is
	// always admitted, even where the rule's count is past its limit).
	Cost int64
	// Zone is the recipient's zone for a calendar rule; nil means the rule's
	// own zone.
	Zone *time.Location
	// Limit, when positive, replaces Rule.Limit for this request (a limit
	// per customer tier); it is capped at Rule.Limit, which then bounds
	// what any request may set. Keys never hold a limit, so a recipient
	// whose limit changes keeps its history. 0 means Rule.Limit.
	Limit int64
	// Shadow makes the check never refuse the request: it is decided,
	// recorded and answered like the others, and its Result says whether
	// it alone would have refused (a rule being tried out before it goes
	// live). A request that another check refuses records nothing in any.
	Shadow bool
	// Sub, when set, names the check's log by the id a Lister listed
	// (HeldLog.Sub), in place of the one Values[1:] and Rule.Weight give:
	// support reading or resetting a log whose values the store keeps
	// only hashed. Values[0] still gives the key. Requests from traffic
	// leave it empty.
	Sub string
	// StoredForms marks, bit i for Values[i], a value that may be given
	// as the store keeps a long one ("#" and the hex of its hash, as a
	// listing shows it): support staff paste it back to read that log.
	// Requests from traffic leave it 0, so that no sent value passes for
	// the hash of another.
	StoredForms uint64
}

// Request is one decision over every rule that applies to a request.
type Request struct {
	Checks []Check
	// Now is the decision time. The zero value means the store's clock: the
	// Redis server's TIME, or the memory store's clock. Tests set it.
	Now time.Time
	// Exempt admits the request whatever its checks say, and records it in
	// every check's log as any admission: a one-time password gets through
	// a full marketing cap and still uses it up.
	Exempt bool
	// Keep is for Store.Reset alone: the records made within Keep before
	// now stay, the older ones are forgotten; 0 forgets every record. A
	// leased budget is reset so (limiter/lease): a block another gateway
	// may still be spending is counted only by its record.
	Keep time.Duration
}

// Result is one rule's part of a decision.
type Result struct {
	Rule  *Rule
	Limit int64
	// Used is what the rule counts in its window, including this request
	// when it was admitted.
	Used int64
	// Remaining is Limit-Used, never below 0.
	Remaining int64
	// Reset is when the next unit frees up: for a rolling window, when the
	// oldest counted record leaves it; for a calendar window, the end of the
	// period. Zero when nothing is counted in a rolling window.
	Reset time.Duration
	// Denied reports that this rule alone would refuse the request.
	Denied bool
	// Waived reports that this rule could not refuse the request: its check
	// is a shadow, or the request is exempt. Denied still says whether it
	// would have refused it.
	Waived bool // next to Denied: the two share a word of the Result
	// RetryAfter is, for a denying rule, how long until it would admit this
	// request's cost: exact, from the records. Zero when Waived.
	RetryAfter time.Duration
}

// Decision is the answer for a request.
type Decision struct {
	Allowed bool
	// Results are in the order of the request's checks.
	Results []Result
	// Denier is the index in Results of the rule that denies longest, or -1.
	// A Waived rule is never the denier.
	Denier int
	// RetryAfter is how long until every denying rule would admit.
	RetryAfter time.Duration
	// Now is the time the decision was made at, by the store's clock.
	Now time.Time
	// Fallback, when not nil, is why a Fallback store's primary could not
	// decide: the decision was made by its local store instead.
	Fallback error
	// id is what ID returns, as bytes: most admissions are never refunded,
	// so the string is made only when asked for.
	id []byte
}

// ID identifies the admission for Refund; it is empty when nothing was
// recorded.
func (d *Decision) ID() string { return string(d.id) }

// Recorded reports whether the decision recorded anything, so that there is
// an admission to refund (ID is not empty).
func (d *Decision) Recorded() bool { return len(d.id) > 0 }

// Store decides requests against recorded history. Every method is safe for
// concurrent use, also from several processes sharing one Redis.
type Store interface {
	// Decide admits the request only if every check admits it, and then
	// records it in every check's log, atomically; a denial records nothing.
	Decide(ctx context.Context, req *Request) (*Decision, error)
	// DecideBatch decides many requests (the recipients of one batch
	// send) in order, each as Decide would and each seeing the ones
	// before it that were admitted, so that two entries for one recipient
	// count one after the other. It returns one Decision per request, in
	// order. Under BatchEach, every admitted request is recorded with an
	// admission id of its own and a denied one records nothing. Under
	// BatchAll, the batch is all or nothing: when any request is denied,
	// nothing is recorded for any (no Decision has an ID), and each
	// Decision says what that request, in its place, was answered.
	DecideBatch(ctx context.Context, reqs []Request, mode BatchMode) ([]*Decision, error)
	// Usage answers as Decide would with each check's cost, recording
	// nothing.
	Usage(ctx context.Context, req *Request) (*Decision, error)
	// Refund gives back what the admission id recorded, once: it reports
	// false for a second refund, an expired record or an unknown id.
	Refund(ctx context.Context, id string) (bool, error)
	// Reset forgets the records of the checks' logs: every record, or
	// those older than Request.Keep.
	Reset(ctx context.Context, req *Request) error
	// Close releases what the store holds.
	Close() error
}

// Sentinel errors; wrapped with %w, so test with errors.Is.
var (
	// ErrStore is returned when the store cannot be reached or fails.
	ErrStore = recordlog.ErrStore
	// ErrTimeout is returned when the store did not answer in time.
	ErrTimeout = errors.New("frequency cap store timed out")
	// ErrClockSkew is returned when the store's clock is more than a
	// calendar period away from the gateway's.
	ErrClockSkew = recordlog.ErrClockSkew
)
