package lease

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// traffic drives gateways leasing one budget from one inner store, on one
// fake clock: at each step every gateway decides a few requests at once
// (the leased budget beside a per-recipient cap that denies some of them),
// a tenth of the admissions are refunded a few steps later, and each
// gateway's sweep runs. It returns the time of every unit admitted and
// not refunded.
type traffic struct {
	gateways, perStep, steps int
	step                     time.Duration
	budget                   *limiter.Rule
}

func (tr traffic) run(t *testing.T, inner limiter.Store, c *clock) []int64 {
	t.Helper()
	ctx := context.Background()
	recipient := &limiter.Rule{Name: "recipient_10s", By: []string{"recipient"}, Limit: 3, Window: limiter.Window{Duration: 10 * time.Second}}
	gs := make([]*Store, tr.gateways)
	for i := range gs {
		gs[i] = gateway(t, inner, c, 0)
	}
	type admitted struct {
		at   int64
		cost int64
		id   string
		g    *Store
	}
	var mu sync.Mutex
	var live []admitted
	var refundLater [][]admitted // by step
	refundLater = make([][]admitted, tr.steps+10)
	rng := rand.New(rand.NewPCG(1, 2))
	costs := make([]int64, tr.gateways*tr.perStep)
	who := make([]int, len(costs))
	for step := range tr.steps {
		for i := range costs {
			costs[i], who[i] = 1+rng.Int64N(3), rng.IntN(100)
		}
		var wg sync.WaitGroup
		var firstErr error
		for gi, g := range gs {
			for k := range tr.perStep {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cost := costs[gi*tr.perStep+k]
					r := req(check(tr.budget, "spring"), check(recipient, fmt.Sprintf("r%d", who[gi*tr.perStep+k])))
					r.Checks[0].Cost = cost
					d, err := g.Decide(ctx, r)
					mu.Lock()
					defer mu.Unlock()
					if err != nil {
						firstErr = err
						return
					}
					if d.Allowed {
						a := admitted{at: c.Now().UnixMilli(), cost: cost, id: d.ID(), g: g}
						if (gi+k+step)%10 == 0 {
							refundLater[step+(gi+k)%4] = append(refundLater[step+(gi+k)%4], a)
						} else {
							live = append(live, a)
						}
					}
				}()
			}
		}
		wg.Wait()
		if firstErr != nil {
			t.Fatalf("step %d: %v", step, firstErr)
		}
		for _, a := range refundLater[step] {
			ok, err := a.g.Refund(ctx, a.id)
			if err != nil {
				t.Fatalf("refund: %v", err)
			}
			if !ok {
				live = append(live, a) // still counted
			}
		}
		for _, g := range gs {
			if err := g.Expire(ctx); err != nil {
				t.Fatalf("expire: %v", err)
			}
		}
		c.Add(tr.step)
	}
	for _, rest := range refundLater[tr.steps:] {
		for _, a := range rest {
			live = append(live, a)
		}
	}
	var at []int64
	for _, a := range live {
		for range a.cost {
			at = append(at, a.at)
		}
	}
	slices.Sort(at)
	return at
}

// No rolling window of the leased budget ever holds more admitted units
// than its limit, with four gateways leasing it concurrently, some
// requests denied by a recipient's cap after taking their units, and
// refunds; and the budget is used: most of it is admitted.
func TestLeasedRollingWindowIsNeverOverAdmitted(t *testing.T) {
	storeKinds(t, func(t *testing.T, newInner func(func() time.Time) limiter.Store) {
		c := newClock(t0)
		budget := &limiter.Rule{Name: "budget_minute", By: []string{"campaign"}, Limit: 2000, Window: limiter.Window{Duration: time.Minute}, Lease: 100}
		tr := traffic{gateways: 4, perStep: 4, steps: 900, step: 200 * time.Millisecond, budget: budget}
		at := tr.run(t, newInner(c.Now), c)
		w := budget.Window.Duration.Milliseconds()
		most, j := 0, 0
		for i, x := range at {
			for at[j] <= x-w {
				j++
			}
			if n := i - j + 1; n > most {
				most = n
			}
		}
		if most > int(budget.Limit) {
			t.Errorf("a minute held %d admitted units; the limit is %d", most, budget.Limit)
		}
		// 3 minutes at the limit: 6,000 units; blocks held unspent and the
		// margin (a hundredth) keep some back.
		if len(at) < 4500 {
			t.Errorf("%d units admitted in 3 minutes of demand over the limit; want most of 6000", len(at))
		}
		t.Logf("%d units admitted; the fullest minute held %d of %d", len(at), most, budget.Limit)
	})
}

// No calendar day of the leased budget holds more admitted units than its
// limit, across midnight: a block's term ends with its day.
func TestLeasedCalendarDayIsNeverOverAdmitted(t *testing.T) {
	storeKinds(t, func(t *testing.T, newInner func(func() time.Time) limiter.Store) {
		c := newClock(time.Date(2026, 3, 7, 23, 59, 0, 0, time.UTC))
		budget := &limiter.Rule{Name: "budget_day", By: []string{"campaign"}, Limit: 1500, Window: limiter.Window{Unit: limiter.Day}, Lease: 100}
		tr := traffic{gateways: 4, perStep: 4, steps: 600, step: 200 * time.Millisecond, budget: budget}
		at := tr.run(t, newInner(c.Now), c)
		midnight := time.Date(2026, 3, 8, 0, 0, 0, 0, time.UTC).UnixMilli()
		before := 0
		for _, x := range at {
			if x < midnight {
				before++
			}
		}
		after := len(at) - before
		if before > int(budget.Limit) || after > int(budget.Limit) {
			t.Errorf("admitted %d before midnight and %d after; the limit is %d a day", before, after, budget.Limit)
		}
		if before < 1300 || after < 1300 {
			t.Errorf("admitted %d before midnight and %d after; want most of %d each", before, after, budget.Limit)
		}
		t.Logf("admitted %d before midnight and %d after, of %d a day", before, after, budget.Limit)
	})
}

// A block taken at D and spent at the end of its term, D+term, covers
// those sends until D+term+W: a gateway deciding at D+W, when the block's
// record would have left an unextended window, still counts it. (Without
// the window's margin, the second gateway would admit 2,000 here, and
// the minute ending then would hold 2,999.)
func TestRollingBlockCoversItsLastSend(t *testing.T) {
	storeKinds(t, func(t *testing.T, newInner func(func() time.Time) limiter.Store) {
		c := newClock(t0)
		inner := newInner(c.Now)
		rule := &limiter.Rule{Name: "budget_minute", By: []string{"campaign"}, Limit: 2000, Window: limiter.Window{Duration: time.Minute}, Lease: 1000}
		a, b := gateway(t, inner, c, time.Hour), gateway(t, inner, c, time.Hour)
		mustDecide(t, a, req(check(rule, "c")))
		c.Add(599 * time.Millisecond) // the term is 600 ms: a hundredth of the minute
		for i := range 999 {
			if d := mustDecide(t, a, req(check(rule, "c"))); !d.Allowed {
				t.Fatalf("send %d of the block denied", i+2)
			}
		}
		c.Set(t0.Add(time.Minute))
		admitted := 0
		for range 2000 {
			if d := mustDecide(t, b, req(check(rule, "c"))); d.Allowed {
				admitted++
			}
		}
		if admitted > 1001 {
			t.Errorf("the second gateway admitted %d; the minute ending now holds 999 of the first's, so at most 1001", admitted)
		}
	})
}
