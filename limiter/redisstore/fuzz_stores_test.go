package redisstore

import (
	"cmp"
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"
	"github.com/freqcap/caddy-freqcap/limiter/memstore"
)

// The store fuzz targets read their input as a sequence of 4-byte ops
// (kind, who, clock step, cost) over fuzzRules, starting a minute before
// midnight in Shanghai (the channel_day rule's zone).

// fuzzSteps are the clock advances an op may pick: the edges of every
// window in fuzzRules.
var fuzzSteps = [...]time.Duration{
	0, time.Millisecond, 7 * time.Millisecond, 999 * time.Millisecond, time.Second, 30 * time.Second,
	59 * time.Second, 59*time.Second + time.Millisecond, time.Minute, 61 * time.Second, 59 * time.Minute,
	time.Hour, 6 * time.Hour, 23 * time.Hour, 24 * time.Hour, 25 * time.Hour,
}

var fuzzStart = time.Date(2026, 3, 7, 15, 59, 0, 0, time.UTC)

// fuzzRules is the seed config, a calendar day per channel in Shanghai, a
// weighted rolling hour, and a per-campaign coupon budget per UTC day whose
// limit is above BucketThreshold, so its log is bucketed.
func fuzzRules(tb testing.TB) []*limiter.Rule {
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	if err != nil {
		tb.Fatal(err)
	}
	return append(limitertest.SeedRules(),
		&limiter.Rule{Name: "channel_day", By: []string{"recipient", "channel"}, Limit: 5, Window: limiter.Window{Unit: limiter.Day, Zone: shanghai}},
		&limiter.Rule{Name: "coins_hour", By: []string{"recipient"}, Limit: 10, Window: limiter.Window{Duration: time.Hour}, Weight: "{json.amount}"},
		&limiter.Rule{Name: "coupons_day", By: []string{"campaign"}, Limit: 2000, Window: limiter.Window{Unit: limiter.Day}, Weight: "{json.coupons}"},
	)
}

type fuzzOpKind uint8

const (
	fuzzDecide fuzzOpKind = iota
	fuzzRefund
	fuzzUsage
	fuzzReset
)

type fuzzOp struct {
	kind fuzzOpKind
	step time.Duration
	v    limitertest.Vals
	pick int   // which earlier admission a refund takes back
	cost int64 // the coins; coupons are cost*7
}

func fuzzOps(data []byte, maxOps int) []fuzzOp {
	var ops []fuzzOp
	for i := 0; i+4 <= len(data) && len(ops) < maxOps; i += 4 {
		k, a, b, c := data[i], data[i+1], data[i+2], data[i+3]
		op := fuzzOp{step: fuzzSteps[int(b)%len(fuzzSteps)], pick: int(a), cost: int64(c % 4)}
		switch {
		case k < 0x90:
			op.kind = fuzzDecide
		case k < 0xd0:
			op.kind = fuzzRefund
		case k < 0xf0:
			op.kind = fuzzUsage
		default:
			op.kind = fuzzReset
		}
		op.v = limitertest.Vals{
			"recipient": []string{"u0", "u1", "u{2}"}[a%3],
			"content":   []string{"hi", "yo"}[(a/3)%2],
			"channel":   []string{"sms", "push"}[(a/6)%2],
			"campaign":  []string{"spring", "autumn"}[(a/12)%2],
		}
		ops = append(ops, op)
	}
	return ops
}

func (op *fuzzOp) request(rules []*limiter.Rule, now time.Time) *limiter.Request {
	r := limitertest.Req(now, op.v, rules...)
	for i := range r.Checks {
		switch r.Checks[i].Rule.Name {
		case "coins_hour":
			r.Checks[i].Cost = op.cost
		case "coupons_day":
			r.Checks[i].Cost = op.cost * 7 * 97 // up to 2037: a few fill the budget
		}
	}
	return r
}

// refModel is a naive reference for the stores: every admission kept
// forever as (time, cost) per log, counted by scanning. It shares only the
// documented rules with the engine: a record that would land at or before
// its log's last one moves to 1 ms after it, but in a bucketed log not
// past now's bucket (it shares the newest live record's time instead, and
// that time's one refund); a rolling window counts
// records after now-D; a calendar window counts from the period's start
// (exact also in a bucketed log); a refund takes back each record of an
// admission once, while it is within its log's retention.
type refModel struct {
	logs map[string][]recordlog.Entry
}

// refLog names the model's log that rule r reads for values v.
func refLog(r *limiter.Rule, v limitertest.Vals) string {
	switch r.Name {
	case "recipient_minute", "recipient_day":
		return v["recipient"]
	case "same_content_59s", "same_content_59m":
		return v["recipient"] + "\x00c\x00" + v["content"]
	case "channel_day":
		return v["recipient"] + "\x00h\x00" + v["channel"]
	case "coins_hour":
		return v["recipient"] + "\x00$"
	}
	return "campaign\x00" + v["campaign"]
}

// isBucketed says whether the model's log is the bucketed one: the coupon
// log, whose rule's limit is above BucketThreshold.
func isBucketed(log string) bool { return strings.HasPrefix(log, "campaign\x00") }

// recordTimes lists the (time, cost) records of an admission's id, sorted.
func recordTimes(stored []recordlog.Recorded) []recordlog.Entry {
	var out []recordlog.Entry
	for _, rec := range stored {
		out = append(out, recordlog.Entry{T: rec.T, C: rec.C})
	}
	return sortEntries(out)
}

func sortEntries(es []recordlog.Entry) []recordlog.Entry {
	slices.SortFunc(es, func(a, b recordlog.Entry) int { return cmp.Or(cmp.Compare(a.T, b.T), cmp.Compare(a.C, b.C)) })
	return es
}

// used is what rule r counts in log at now, and the records it counts,
// oldest first.
func (m *refModel) used(log string, r *limiter.Rule, now time.Time) (used int64, records []recordlog.Entry) {
	from := now.UnixMilli() - r.Window.Duration.Milliseconds() + 1
	if r.Window.IsCalendar() {
		zone := r.Window.Zone
		if zone == nil {
			zone = time.UTC
		}
		from = limiter.PeriodStart(now.In(zone), r.Window.Unit).UnixMilli()
	}
	for _, e := range m.logs[log] {
		if e.T >= from {
			used += e.C
			records = append(records, e)
		}
	}
	return used, records
}

// The memory store agrees with a naive reference model on arbitrary
// sequences of decisions, refunds, usage lookups and resets over
// fuzzRules: same admission, same used count for every rule, same refund
// answers, and for a denying rolling rule the exact retry-after computed
// from the model's records.
func FuzzMemoryVsModel(f *testing.F) {
	rules := fuzzRules(f)
	// A log's retention: the longest of the rules reading it.
	retention := map[string]int64{}
	for _, r := range rules {
		name := refLog(r, limitertest.Vals{})
		retention[name] = max(retention[name], (r.Window.Retention().Milliseconds()+999)/1000*1000)
	}
	type refRec struct {
		log string
		e   recordlog.Entry
		ret int64
		gen int // the log's reset count when recorded
	}
	type admission struct {
		id       string
		recs     []refRec
		refunded bool
	}
	type logTime struct {
		log string
		t   int64
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		now := fuzzStart
		mem := memstore.New(memstore.Options{Now: func() time.Time { return now }, SweepInterval: -1})
		defer mem.Close()
		ref := &refModel{logs: map[string][]recordlog.Entry{}}
		var admissions []*admission
		issued := map[logTime]bool{}
		tombs := map[logTime]bool{} // the model's refunded record times
		resets := map[string]int{}
		issuedMax := map[string]int64{} // per log, the latest record time issued
		ctx := context.Background()
		for n, op := range fuzzOps(data, 300) {
			now = now.Add(op.step)
			r := op.request(rules, now)
			switch op.kind {
			case fuzzDecide:
				d, err := mem.Decide(ctx, r)
				if err != nil {
					t.Fatalf("op %d: %v", n, err)
				}
				type want struct {
					used  int64
					retry time.Duration
					deny  bool
				}
				allow := true
				wants := make([]want, len(rules))
				for k, rule := range rules {
					cost := r.Checks[k].Cost
					used, recs := ref.used(refLog(rule, op.v), rule, now)
					w := want{used: used, deny: used+cost > rule.Limit}
					if w.deny && !rule.Window.IsCalendar() && cost <= rule.Limit {
						need := used + cost - rule.Limit
						for _, e := range recs {
							if need -= e.C; need <= 0 {
								w.retry = time.Duration(e.T+rule.Window.Duration.Milliseconds()-now.UnixMilli()) * time.Millisecond
								break
							}
						}
					}
					allow = allow && !w.deny
					wants[k] = w
				}
				if d.Allowed != allow {
					t.Fatalf("op %d at %s for %v: allowed=%v, model %v\nstore %s\nmodel %+v", n, now, op.v, d.Allowed, allow, limitertest.Describe(d), wants)
				}
				for k, w := range wants {
					res := d.Results[k]
					if allow {
						w.used += r.Checks[k].Cost
					}
					if res.Used != w.used || res.Denied != w.deny {
						t.Fatalf("op %d at %s rule %s: used %d denied %v, model %d %v", n, now, rules[k].Name, res.Used, res.Denied, w.used, w.deny)
					}
					if w.deny && !rules[k].Window.IsCalendar() && res.RetryAfter != w.retry {
						t.Fatalf("op %d rule %s: retry after %s, model %s", n, rules[k].Name, res.RetryAfter, w.retry)
					}
				}
				if !allow {
					continue
				}
				stored, _ := recordlog.DecodeID(d.ID())
				var grain int64 // the bucketed (coupon) log's bucket
				for _, rec := range stored {
					grain = max(grain, rec.Grain)
				}
				// One record per log with a cost, as the store keeps them.
				var recs []refRec
				seen := map[string]bool{}
				for k, rule := range rules {
					log, cost := refLog(rule, op.v), r.Checks[k].Cost
					if seen[log] || cost == 0 {
						seen[log] = true
						continue
					}
					seen[log] = true
					// Every admission gets a time later than any the log
					// has issued, refunded or forgotten ones included...
					ms := now.UnixMilli()
					at := max(ms, issuedMax[log]+1)
					// ...except in a bucketed log, where a time past now's
					// bucket is the newest live record's, shared, unless
					// that time was refunded.
					if l := ref.logs[log]; isBucketed(log) && at > ms && at/grain != ms/grain &&
						len(l) > 0 && l[len(l)-1].T == at-1 && !tombs[logTime{log, at - 1}] {
						at--
					}
					issuedMax[log] = at
					e := recordlog.Entry{T: at, C: cost}
					ref.logs[log] = append(ref.logs[log], e)
					recs = append(recs, refRec{log: log, e: e, ret: retention[refLog(rule, limitertest.Vals{})], gen: resets[log]})
				}
				if (d.ID() != "") != (len(recs) > 0) {
					t.Fatalf("op %d: id %q for %d records", n, d.ID(), len(recs))
				}
				// The store's records have the model's times and costs.
				var modelled []recordlog.Entry
				for _, rr := range recs {
					modelled = append(modelled, rr.e)
				}
				if got, want := recordTimes(stored), sortEntries(modelled); !slices.Equal(got, want) {
					t.Fatalf("op %d: records at %v, model %v", n, got, want)
				}
				// Every admission has a time of its own in each log that
				// is not bucketed, even after refunds and resets: an id
				// names one admission, ever.
				for _, rec := range stored {
					k := logTime{rec.Key + "\x00" + rec.Sub, rec.T}
					if issued[k] && rec.Grain == 0 {
						t.Fatalf("op %d: record time %d reused in %q", n, rec.T, k.log)
					}
					issued[k] = true
				}
				if d.ID() != "" {
					admissions = append(admissions, &admission{id: d.ID(), recs: recs})
				}
			case fuzzRefund:
				if len(admissions) == 0 {
					continue
				}
				adm := admissions[op.pick%len(admissions)]
				got, err := mem.Refund(ctx, adm.id)
				if err != nil {
					t.Fatal(err)
				}
				// A record within its log's retention must come back; one
				// past it may or may not (a bucket lives as long as its
				// latest record), and no window counts it any more.
				want, either, forgotten := false, false, false
				for _, rr := range adm.recs {
					forgotten = forgotten || (isBucketed(rr.log) && resets[rr.log] != rr.gen)
				}
				if !adm.refunded {
					for _, rr := range adm.recs {
						// Admissions that share a time share its refund:
						// the first is taken, later ones give nothing
						// back in that log.
						if tombs[logTime{rr.log, rr.e.T}] {
							continue
						}
						tombs[logTime{rr.log, rr.e.T}] = true
						l := ref.logs[rr.log]
						for j, e := range l {
							if e == rr.e {
								ref.logs[rr.log] = append(l[:j:j], l[j+1:]...)
								if rr.e.T > now.UnixMilli()-rr.ret {
									want = true
								} else {
									either = true
								}
								break
							}
						}
					}
					adm.refunded = true
				}
				// A log forgotten by a reset gives nothing back (the model
				// dropped its records), others do: the usage checks that
				// follow catch quota taken from a newer record.
				if got && forgotten && !want && !either {
					t.Fatalf("op %d: the refund of an admission forgotten by a reset took quota from a newer one", n)
				}
				if got != want && !(either && got) {
					t.Fatalf("op %d: refund %q = %v, model %v", n, adm.id, got, want)
				}
			case fuzzUsage:
				d, err := mem.Usage(ctx, r)
				if err != nil {
					t.Fatal(err)
				}
				for k, rule := range rules {
					if used, _ := ref.used(refLog(rule, op.v), rule, now); d.Results[k].Used != used {
						t.Fatalf("op %d usage rule %s: %d, model %d", n, rule.Name, d.Results[k].Used, used)
					}
				}
			case fuzzReset:
				if err := mem.Reset(ctx, r); err != nil {
					t.Fatal(err)
				}
				for _, rule := range rules {
					delete(ref.logs, refLog(rule, op.v))
					resets[refLog(rule, op.v)]++
				}
			}
		}
	})
}

// The memory store and the Redis store, given the same arbitrary sequence
// of decisions, refunds, usage lookups and resets over fuzzRules (bucketed
// log included), give identical decisions, admission ids and refund
// answers. The seed-driven differential test samples realistic traffic;
// this one lets the fuzzer search for the corners. Each fuzz worker starts
// its own redis-server.
func FuzzMemoryVsRedis(f *testing.F) {
	rules := fuzzRules(f)
	client := redistest.Client(f)
	const prefix = "fz:"
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx := context.Background()
		if err := client.FlushDB(ctx).Err(); err != nil {
			t.Fatal(err)
		}
		now := fuzzStart
		clock := func() time.Time { return now }
		mem := memstore.New(memstore.Options{Now: clock, SweepInterval: -1})
		defer mem.Close()
		red := New(client, Options{Now: clock, Timeout: 5 * time.Second, Prefix: prefix, GoBatchMin: 1})
		defer red.Close()
		var ids []string
		for n, op := range fuzzOps(data, 100) {
			now = now.Add(op.step)
			r := op.request(rules, now)
			switch op.kind {
			case fuzzDecide, fuzzUsage:
				do := limiter.Store.Decide
				if op.kind == fuzzUsage {
					do = limiter.Store.Usage
				}
				dm, errM := do(mem, ctx, r)
				dr, errR := do(red, ctx, r)
				if errM != nil || errR != nil {
					t.Fatalf("op %d: memory %v, redis %v", n, errM, errR)
				}
				if !limitertest.SameDecision(dm, dr) || redisID(dm.ID(), prefix) != dr.ID() {
					t.Fatalf("op %d at %s for %v differ:\nmemory %s id %q\nredis  %s id %q", n, now, op.v, limitertest.Describe(dm), dm.ID(), limitertest.Describe(dr), dr.ID())
				}
				if dm.ID() != "" {
					ids = append(ids, dm.ID())
				}
			case fuzzRefund:
				if len(ids) == 0 {
					continue
				}
				id := ids[op.pick%len(ids)]
				a, errA := mem.Refund(ctx, id)
				b, errB := red.Refund(ctx, redisID(id, prefix))
				if a != b || errA != nil || errB != nil {
					t.Fatalf("op %d at %s: refund %q: memory %v %v, redis %v %v", n, now, id, a, errA, b, errB)
				}
			case fuzzReset:
				errM, errR := mem.Reset(ctx, r), red.Reset(ctx, r)
				if errM != nil || errR != nil {
					t.Fatalf("op %d: reset: memory %v, redis %v", n, errM, errR)
				}
			}
		}
	})
}
