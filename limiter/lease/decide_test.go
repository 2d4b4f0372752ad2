package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/memstore"
)

// perRecipient is the seed's kind of cap, beside the leased budget.
var perRecipient = &limiter.Rule{Name: "recipient_minute", By: []string{"recipient"}, Limit: 1, Window: limiter.Window{Duration: time.Minute}}

func memInner(t *testing.T, c *clock) *counting {
	m := memstore.New(memstore.Options{Now: c.Now, SweepInterval: -1})
	t.Cleanup(func() { m.Close() })
	return &counting{Store: m}
}

// A request that takes a unit from the block and is then denied by the
// recipient's cap gives the unit back to the block, without a store call,
// and its answer counts the leased rule without it: the store ends up
// counting only the admitted sends.
func TestRecipientDenialGivesTheUnitBack(t *testing.T) {
	c := newClock(t0)
	inner := memInner(t, c)
	g := gateway(t, inner, c, time.Minute)
	rule := coupons(100)
	send := func(who string) *limiter.Decision {
		return mustDecide(t, g, req(check(rule, "c"), check(perRecipient, who)))
	}
	if d := send("alice"); !d.Allowed || d.Results[0].Used != 1 || d.Results[0].Remaining != 233_299 {
		t.Fatalf("first send: %+v", d)
	}
	d := send("alice")
	if d.Allowed || d.Denier != 1 || d.Results[0].Denied || !d.Results[1].Denied || d.RetryAfter != time.Minute {
		t.Fatalf("second send to alice: allowed=%v denier=%d retry=%s results=%+v", d.Allowed, d.Denier, d.RetryAfter, d.Results)
	}
	if d.ID() != "" {
		t.Errorf("a denied decision has the id %q", d.ID())
	}
	// The leased rule's answer in the denial is what it counts without
	// the send, as any store answers it (the quota fields read it).
	if r := d.Results[0]; r.Used != 1 || r.Remaining != 233_299 {
		t.Errorf("the leased rule in the denial: used %d, remaining %d; want 1 and 233299", r.Used, r.Remaining)
	}
	if d := send("bob"); !d.Allowed || d.Results[0].Used != 2 {
		t.Fatalf("send to bob: %+v", d.Results)
	}
	// One block, three recipient decisions: the leased rule asked the
	// store once.
	if n := inner.decides.Load(); n != 4 {
		t.Errorf("%d store decisions; want 4 (one block, three recipient caps)", n)
	}
	c.Add(time.Minute)
	if err := g.Expire(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := used(t, inner, check(rule, "c")); got != 2 {
		t.Errorf("store counts %d after the term; want the 2 admitted", got)
	}
}

// A refunded leased send goes back to its block while the block is being
// spent (no store call; the unit can be spent again), once; a refund after
// the block gave back is refused, and the unit stays counted.
func TestRefundOfALeasedSend(t *testing.T) {
	c := newClock(t0)
	inner := memInner(t, c)
	g := gateway(t, inner, c, time.Minute)
	rule := coupons(100)
	ctx := context.Background()
	a := mustDecide(t, g, req(check(rule, "c"), check(perRecipient, "alice")))
	b := mustDecide(t, g, req(check(rule, "c"), check(perRecipient, "bob")))
	refundsBefore := inner.refunds.Load()
	if ok, err := g.Refund(ctx, a.ID()); !ok || err != nil {
		t.Fatalf("refund of a leased send: %v %v", ok, err)
	}
	if ok, _ := g.Refund(ctx, a.ID()); ok {
		t.Errorf("a second refund of one admission went through")
	}
	if n := inner.refunds.Load() - refundsBefore; n != 2 {
		t.Errorf("%d store refunds; want 2 (alice's recipient cap, once, and the second refund's attempt)", n)
	}
	if d := mustDecide(t, g, req(check(rule, "c"), check(perRecipient, "alice"))); !d.Allowed || d.Results[0].Used != 2 {
		t.Errorf("alice again after her refund: %+v", d.Results)
	}
	c.Add(time.Minute)
	if err := g.Expire(ctx); err != nil {
		t.Fatal(err)
	}
	if got := used(t, inner, check(rule, "c")); got != 2 {
		t.Errorf("store counts %d after the term; want 2 (bob, alice again)", got)
	}
	if ok, _ := g.Refund(ctx, b.ID()); ok {
		t.Errorf("a refund after the block gave back went through")
	}
	if got := used(t, inner, check(rule, "c")); got != 2 {
		t.Errorf("store counts %d after a late refund; want 2", got)
	}
}

// A block whose sends were all taken gives nothing back at its term's end,
// so a refund after it still reaches the store, once.
func TestRefundAfterTheTermOfASpentBlock(t *testing.T) {
	c := newClock(t0)
	inner := memInner(t, c)
	g := gateway(t, inner, c, time.Minute)
	rule := coupons(2)
	ctx := context.Background()
	a := mustDecide(t, g, req(check(rule, "c")))
	b := mustDecide(t, g, req(check(rule, "c")))
	c.Add(time.Minute)
	if err := g.Expire(ctx); err != nil {
		t.Fatal(err)
	}
	if ok, err := g.Refund(ctx, a.ID()); !ok || err != nil {
		t.Fatalf("refund after the term: %v %v", ok, err)
	}
	if got := used(t, inner, check(rule, "c")); got != 1 {
		t.Errorf("store counts %d; want 1", got)
	}
	if ok, _ := g.Refund(ctx, b.ID()); ok {
		t.Errorf("a second refund from one block's record went through (the store refunds a record once)")
	}
}

// Near the limit a block asks for no more than the store said remains, down
// to the request's cost; at the limit the request is decided whole and
// denied by the leased rule, with the store's retry time.
func TestBlocksShrinkNearTheLimitAndTheDenialIsExact(t *testing.T) {
	c := newClock(t0)
	inner := memInner(t, c)
	rule := &limiter.Rule{Name: "budget_hour", By: []string{"campaign"}, Limit: 1050, Window: limiter.Window{Duration: time.Hour}, Lease: 100}
	other := gateway(t, inner, c, time.Minute)
	big := check(rule, "c")
	big.Cost = 1000
	if d := mustDecide(t, other, req(big)); !d.Allowed {
		t.Fatalf("first 1000: %+v", d.Results)
	}
	g := gateway(t, inner, c, time.Minute)
	for i := range 50 {
		if d := mustDecide(t, g, req(check(rule, "c"))); !d.Allowed {
			t.Fatalf("send %d of the last 50 denied: %+v", i, d.Results)
		}
	}
	c.Add(time.Second)
	d := mustDecide(t, g, req(check(rule, "c")))
	if d.Allowed || d.Denier != 0 || !d.Results[0].Denied {
		t.Fatalf("send 1051: %+v", d)
	}
	// The first 1000 leave the hour (counted a hundredth longer: 36 s),
	// in a bucket that took the last block's time, 1 ms later.
	want := time.Hour + 36*time.Second - time.Second + time.Millisecond
	if d.RetryAfter != want || d.Results[0].RetryAfter != want {
		t.Errorf("retry after %s; want %s", d.RetryAfter, want)
	}
	if d.Results[0].Rule != rule || d.Results[0].Limit != 1050 || d.Results[0].Used != 1050 {
		t.Errorf("denial's result %+v", d.Results[0])
	}
}

// At any moment the units leased and not spent are at most one block a
// gateway: ten gateways that each admitted one send leave the store
// counting ten blocks, and nothing more is leased while they hold them.
func TestUnderAdmissionIsAtMostOneBlockAGateway(t *testing.T) {
	c := newClock(t0)
	inner := memInner(t, c)
	rule := &limiter.Rule{Name: "budget_day", By: []string{"campaign"}, Limit: 10_000, Window: limiter.Window{Unit: limiter.Day}, Lease: 1000}
	var gs []*Store
	for range 10 {
		g := gateway(t, inner, c, time.Minute)
		gs = append(gs, g)
		if d := mustDecide(t, g, req(check(rule, "c"))); !d.Allowed {
			t.Fatalf("gateway %d denied: %+v", len(gs), d.Results)
		}
	}
	if got := used(t, inner, check(rule, "c")); got != 10_000 {
		t.Errorf("store counts %d; want 10 blocks of 1000", got)
	}
	// An eleventh gateway is refused: 9,990 units are leased, unspent.
	late := gateway(t, inner, c, time.Minute)
	if d := mustDecide(t, late, req(check(rule, "c"))); d.Allowed {
		t.Errorf("an eleventh gateway was admitted past the leased budget")
	}
	// Once their term ends the blocks go back, and it is admitted.
	c.Add(time.Minute)
	for _, g := range gs {
		if err := g.Expire(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	if got := used(t, inner, check(rule, "c")); got != 10 {
		t.Errorf("store counts %d after the term; want the 10 sent", got)
	}
	if d := mustDecide(t, late, req(check(rule, "c"))); !d.Allowed {
		t.Errorf("the eleventh gateway was refused after the blocks went back: %+v", d.Results)
	}
}

// A reset of a leased budget on one gateway leaves the block another
// gateway is spending counted: that gateway goes on spending it without
// a store call, and the sends made after the reset, from its block and
// from the store, stay within the limit. (Forgetting the block's record
// let a second gateway's block be spent uncounted: a block over the
// limit after a reset.)
func TestResetKeepsOtherGatewaysBlocks(t *testing.T) {
	c := newClock(t0)
	inner := memInner(t, c)
	a, b := gateway(t, inner, c, time.Minute), gateway(t, inner, c, time.Minute)
	rule := &limiter.Rule{Name: "coupons", By: []string{"campaign"}, Limit: 2000, Window: limiter.Window{Unit: limiter.Day}, Lease: 200}
	for range 5 {
		mustDecide(t, b, req(check(rule, "spring")))
	}
	mustDecide(t, a, req(check(rule, "spring")))
	c.Add(10 * time.Second)
	if err := a.Reset(context.Background(), req(check(rule, "spring"))); err != nil {
		t.Fatal(err)
	}
	if got := used(t, inner, check(rule, "spring")); got != 200 {
		t.Errorf("after the reset the store counts %d; want b's block of 200 (a's own forgotten)", got)
	}
	after := 0
	for range 50 {
		if d := mustDecide(t, b, req(check(rule, "spring"))); d.Allowed {
			after++
		}
	}
	for range 3000 {
		if d := mustDecide(t, a, req(check(rule, "spring"))); d.Allowed {
			after++
		}
	}
	if after > int(rule.Limit) {
		t.Errorf("%d sends admitted after the reset, over the limit of %d", after, rule.Limit)
	}
	if after < int(rule.Limit)-200 {
		t.Errorf("%d sends admitted after the reset; want at least the limit less b's block", after)
	}
}

// A reset of a leased budget forgets the store's records and drops the
// gateway's lease: the next send takes a fresh block.
func TestResetDropsTheLease(t *testing.T) {
	c := newClock(t0)
	inner := memInner(t, c)
	g := gateway(t, inner, c, time.Minute)
	rule := coupons(100)
	for range 3 {
		mustDecide(t, g, req(check(rule, "c")))
	}
	if err := g.Reset(context.Background(), req(check(rule, "c"))); err != nil {
		t.Fatal(err)
	}
	if got := used(t, inner, check(rule, "c")); got != 0 {
		t.Errorf("store counts %d after the reset", got)
	}
	before := inner.decides.Load()
	d := mustDecide(t, g, req(check(rule, "c")))
	if !d.Allowed || d.Results[0].Used != 1 || inner.decides.Load() != before+1 {
		t.Errorf("first send after the reset: %+v, %d store decisions", d.Results, inner.decides.Load()-before)
	}
	if got := used(t, inner, check(rule, "c")); got != 100 {
		t.Errorf("store counts %d; want a fresh block", got)
	}
}

// Requests a block cannot serve exactly are decided whole on the store:
// exempt ones, shadow checks, a per-request limit, a zero cost.
func TestRequestsDecidedWhole(t *testing.T) {
	c := newClock(t0)
	inner := memInner(t, c)
	g := gateway(t, inner, c, time.Minute)
	rule := coupons(100)
	for name, r := range map[string]*limiter.Request{
		"exempt":  {Checks: []limiter.Check{check(rule, "c")}, Exempt: true},
		"shadow":  {Checks: []limiter.Check{{Rule: rule, Values: []string{"c"}, Cost: 1, Shadow: true}}},
		"limit":   {Checks: []limiter.Check{{Rule: rule, Values: []string{"c"}, Cost: 1, Limit: 500}}},
		"no cost": {Checks: []limiter.Check{{Rule: rule, Values: []string{"c"}}}},
	} {
		before := inner.decides.Load()
		d := mustDecide(t, g, r)
		if !d.Allowed || d.Results[0].Rule != rule || inner.decides.Load() != before+1 {
			t.Errorf("%s: %+v after %d store decisions", name, d.Results, inner.decides.Load()-before)
		}
	}
	if got := used(t, inner, check(rule, "c")); got != 3 {
		t.Errorf("store counts %d; want the 3 sends that count, and no block", got)
	}
}

// Behind a Fallback (on_error local), a gateway keeps admitting from the
// block in hand while the store is down; when it needs a block, the error
// goes up and the fallback decides locally.
func TestOnErrorLocal(t *testing.T) {
	c := newClock(t0)
	shared := &failing{Store: memInner(t, c)}
	rule := coupons(2)
	g := New(shared, Options{Now: c.Now, Term: time.Minute, Sweep: -1})
	local := memstore.New(memstore.Options{Now: c.Now, SweepInterval: -1})
	f := limiter.NewFallback(g, local, 1)
	t.Cleanup(func() { f.Close() })
	if d := mustDecide(t, f, req(check(rule, "c"))); !d.Allowed || d.Fallback != nil {
		t.Fatalf("first send: %+v", d)
	}
	shared.down.Store(true)
	if d := mustDecide(t, f, req(check(rule, "c"))); !d.Allowed || d.Fallback != nil {
		t.Fatalf("second send, from the block in hand: allowed=%v fallback=%v", d.Allowed, d.Fallback)
	}
	d := mustDecide(t, f, req(check(rule, "c")))
	if !d.Allowed || !errors.Is(d.Fallback, limiter.ErrStore) {
		t.Fatalf("third send, needing a block: allowed=%v fallback=%v", d.Allowed, d.Fallback)
	}
	if ok, err := f.Refund(context.Background(), d.ID()); !ok || err != nil {
		t.Errorf("refund of the local decision: %v %v", ok, err)
	}
}

// A rule set where a leased rule shares its log is refused, and so is a
// rule a lease cannot serve.
func TestCheckRules(t *testing.T) {
	leased := coupons(1000)
	twin := &limiter.Rule{Name: "coupons_hour", By: []string{"campaign"}, Limit: 20_000, Window: limiter.Window{Duration: time.Hour}}
	if err := CheckRules([]*limiter.Rule{leased, twin}); err == nil {
		t.Errorf("a leased rule sharing its log was accepted")
	}
	if err := CheckRules([]*limiter.Rule{leased, perRecipient}); err != nil {
		t.Errorf("the issue's rules were refused: %v", err)
	}
	for _, r := range []*limiter.Rule{
		{Name: "small", By: []string{"c"}, Limit: 1000, Window: limiter.Window{Unit: limiter.Day}, Lease: 10},
		{Name: "big_block", By: []string{"c"}, Limit: 10_000, Window: limiter.Window{Unit: limiter.Day}, Lease: 1001},
		{Name: "short", By: []string{"c"}, Limit: 10_000, Window: limiter.Window{Duration: 30 * time.Second}, Lease: 100},
		{Name: "long", By: []string{"c"}, Limit: 10_000, Window: limiter.Window{Duration: 179 * 24 * time.Hour}, Lease: 100},
	} {
		if err := CheckRules([]*limiter.Rule{r}); err == nil {
			t.Errorf("rule %s was accepted", r.Name)
		}
	}
}

// Once the store has said the budget is spent, a request is decided whole
// at once (one store call, not a block asked for and refused first), and
// blocks are taken again when the store says units remain.
func TestSpentBudgetCostsOneStoreCallARequest(t *testing.T) {
	c := newClock(t0)
	inner := memInner(t, c)
	rule := &limiter.Rule{Name: "budget_hour", By: []string{"campaign"}, Limit: 2000, Window: limiter.Window{Duration: time.Hour}, Lease: 100}
	g := gateway(t, inner, c, time.Minute)
	all := check(rule, "c")
	all.Cost = 2000
	if d := mustDecide(t, g, req(all)); !d.Allowed {
		t.Fatalf("the whole budget: %+v", d.Results)
	}
	mustDecide(t, g, req(check(rule, "c"))) // learns that nothing remains
	before := inner.decides.Load()
	for range 5 {
		if d := mustDecide(t, g, req(check(rule, "c"))); d.Allowed {
			t.Fatal("admitted past the budget")
		}
	}
	if n := inner.decides.Load() - before; n != 5 {
		t.Errorf("%d store decisions for 5 requests past the budget; want 5", n)
	}
	c.Add(time.Hour + 36*time.Second)
	if d := mustDecide(t, g, req(check(rule, "c"))); !d.Allowed {
		t.Fatalf("refused once the budget left the window: %+v", d.Results)
	}
	before = inner.decides.Load()
	for range 5 {
		mustDecide(t, g, req(check(rule, "c")))
	}
	if n := inner.decides.Load() - before; n != 1 {
		t.Errorf("%d store decisions for 5 requests with the budget free; want 1 block", n)
	}
}

// Support reads through a lease store, behind a Fallback as caddymodule
// composes them: the logs held under a value, and the sends a rule
// counts (a block shows as one send of its units).
func TestSupportReadsThroughTheLease(t *testing.T) {
	c := newClock(t0)
	inner := memInner(t, c)
	g := New(inner.Store, Options{Now: c.Now, Term: time.Minute, Sweep: -1})
	local := memstore.New(memstore.Options{Now: c.Now, SweepInterval: -1})
	f := limiter.NewFallback(g, local, 1)
	t.Cleanup(func() { f.Close() })
	rule := coupons(100)
	mustDecide(t, f, req(check(rule, "c")))
	held, err := f.Held(context.Background(), "campaign", "c", time.Time{})
	if err != nil || len(held) != 1 || held[0].Records != 1 {
		t.Errorf("held: %+v %v; want the block's one record", held, err)
	}
	sends, err := f.History(context.Background(), req(check(rule, "c")))
	if err != nil || len(sends) != 1 {
		t.Fatalf("history: %+v %v", sends, err)
	}
}

// Usage counts a leased rolling rule over its longer window, as its sends
// are decided: a block taken a minute and 0.3 s ago still counts against
// a 1-minute window (its margin is 0.6 s), so what Usage says remains is
// what the next send gets.
func TestUsageCountsTheLongerWindow(t *testing.T) {
	c := newClock(t0)
	inner := memInner(t, c)
	g := gateway(t, inner, c, time.Minute)
	rule := &limiter.Rule{Name: "minute_budget", By: []string{"campaign"}, Limit: 2000, Window: limiter.Window{Duration: time.Minute}, Lease: 100}
	mustDecide(t, g, req(check(rule, "spring")))
	c.Add(time.Minute + 300*time.Millisecond)
	if got := used(t, g, check(rule, "spring")); got != 100 {
		t.Errorf("used %d a minute and 0.3 s after the block; want its 100 (window plus a hundredth)", got)
	}
	c.Add(time.Second)
	if got := used(t, g, check(rule, "spring")); got != 0 {
		t.Errorf("used %d past the longer window; want 0", got)
	}
}

// A send costing more than the block in hand holds, which the store
// refuses while it counts that block as used, is decided again once this
// gateway gave the block's unspent units back: 11 of 1010 spent from a
// block of 101, a send of 999 is admitted (it was refused until the end
// of the day, with 90 of the 999 sitting unspent in the block), and the
// next unit is refused. On the memory store and on Redis.
func TestALargeCostIsNotRefusedForTheGatewaysOwnBlock(t *testing.T) {
	storeKinds(t, func(t *testing.T, newInner func(now func() time.Time) limiter.Store) {
		c := newClock(t0)
		inner := newInner(c.Now)
		g := gateway(t, inner, c, 5*time.Minute)
		rule := &limiter.Rule{Name: "budget_day", By: []string{"campaign"}, Limit: 1010, Window: limiter.Window{Unit: limiter.Day}, Lease: 101}
		for i := range 11 {
			if d := mustDecide(t, g, req(check(rule, "c"))); !d.Allowed {
				t.Fatalf("send %d denied: %+v", i, d.Results)
			}
		}
		big := check(rule, "c")
		big.Cost = 999
		if d := mustDecide(t, g, req(big)); !d.Allowed {
			t.Fatalf("999 of the 999 left denied, retry after %s: %+v", d.RetryAfter, d.Results)
		}
		d := mustDecide(t, g, req(check(rule, "c")))
		if d.Allowed || !d.Results[0].Denied || d.Results[0].Used != 1010 {
			t.Fatalf("the 1011th unit: %+v", d.Results)
		}
		if err := g.Close(); err != nil {
			t.Fatal(err)
		}
		if got := used(t, inner, check(rule, "c")); got != 1010 {
			t.Errorf("the store counts %d; want the 1010 sent", got)
		}
	})
}

// holding is an inner store that holds the decisions naming a value until
// let is closed, once armed: a request in flight with units taken.
type holding struct {
	limiter.Store
	value string
	armed atomic.Bool
	in    chan struct{} // closed when a held decision arrives
	let   chan struct{}
}

func (h *holding) Decide(ctx context.Context, req *limiter.Request) (*limiter.Decision, error) {
	for _, c := range req.Checks {
		if h.armed.Load() && slices.Contains(c.Values, h.value) {
			close(h.in)
			<-h.let
			break
		}
	}
	return h.Store.Decide(ctx, req)
}

// A send in flight with units of a block keeps them when a large cost
// gives the block's unspent units back meanwhile: denied by its
// recipient's cap afterwards, it puts them back into the block, which this
// gateway spends again, so the budget is spent to its last unit and no
// denied send stays counted.
func TestAReleaseKeepsWhatSendsInFlightPutBack(t *testing.T) {
	c := newClock(t0)
	inner := &holding{Store: memInner(t, c), value: "zoe", in: make(chan struct{}), let: make(chan struct{})}
	g := gateway(t, inner, c, 5*time.Minute)
	rule := &limiter.Rule{Name: "budget_day", By: []string{"campaign"}, Limit: 1010, Window: limiter.Window{Unit: limiter.Day}, Lease: 101}
	send := func(cost int64, who string) *limiter.Decision {
		camp := check(rule, "c")
		camp.Cost = cost
		return mustDecide(t, g, req(camp, check(perRecipient, who)))
	}
	for i := range 10 {
		if d := send(1, fmt.Sprint("r", i)); !d.Allowed {
			t.Fatalf("send %d denied: %+v", i, d.Results)
		}
	}
	if d := send(1, "zoe"); !d.Allowed {
		t.Fatalf("zoe's first send denied: %+v", d.Results)
	}
	inner.armed.Store(true)
	done := make(chan *limiter.Decision)
	go func() { done <- send(50, "zoe") }() // takes 50, then waits on zoe's cap
	<-inner.in
	inner.armed.Store(false)
	if d := send(949, "big"); !d.Allowed {
		t.Fatalf("949 of the 999 left (50 in flight) denied: %+v", d.Results)
	}
	close(inner.let)
	if d := <-done; d.Allowed {
		t.Fatalf("zoe's second send in the minute admitted")
	}
	for i := range 50 {
		if d := send(1, fmt.Sprint("s", i)); !d.Allowed {
			t.Fatalf("send %d of the 50 zoe put back denied: %+v", i, d.Results)
		}
	}
	if d := send(1, "last"); d.Allowed {
		t.Fatalf("the 1011th unit admitted")
	}
	if err := g.Close(); err != nil {
		t.Fatal(err)
	}
	if got := used(t, inner, check(rule, "c")); got != 1010 {
		t.Errorf("the store counts %d; want the 1010 sent", got)
	}
}
