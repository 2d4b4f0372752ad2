package limiter_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/limiter"
	"github.com/freqcap/caddy-freqcap/limiter/internal/limitertest"
	"github.com/freqcap/caddy-freqcap/limiter/memstore"
)

// downStore is a primary store that fails every call it is given.
type downStore struct{ limiter.Store }

var errDown = errors.New("connection refused")

func (downStore) Decide(context.Context, *limiter.Request) (*limiter.Decision, error) {
	return nil, errors.Join(limiter.ErrStore, errDown)
}

func (downStore) Reset(context.Context, *limiter.Request) error {
	return errors.Join(limiter.ErrStore, errDown)
}

// TestFallbackResetFailsWhole proves that a reset the primary fails
// changes nothing: the local store deciding during the outage keeps its
// count, so the caller told the reset failed finds the cap in place. A
// probe's reset during an outage under on_error local answered 503 and
// let the next send through.
func TestFallbackResetFailsWhole(t *testing.T) {
	local := memstore.New(memstore.Options{})
	defer local.Close()
	f := limiter.NewFallback(downStore{}, local, 1)
	rule := &limiter.Rule{Name: "hour", By: []string{"recipient"}, Limit: 1, Window: limiter.Window{Duration: time.Hour}}
	req := func() *limiter.Request {
		return limitertest.Req(time.Time{}, limitertest.Vals{"recipient": "erin"}, rule)
	}
	ctx := context.Background()
	for i, want := range []bool{true, false} {
		d, err := f.Decide(ctx, req())
		if err != nil || d.Allowed != want || d.Fallback == nil {
			t.Fatalf("send %d decided locally: %+v, %v; want allowed %v", i, d, err, want)
		}
	}
	if err := f.Reset(ctx, req()); !errors.Is(err, errDown) {
		t.Fatalf("reset = %v, want the primary's failure", err)
	}
	if d, err := f.Decide(ctx, req()); err != nil || d.Allowed {
		t.Errorf("after the failed reset: %+v, %v; want still refused", d, err)
	}
}
