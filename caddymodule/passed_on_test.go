package caddymodule

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// TestPassedOnOutlivesItsSender proves what a sender's going away does to
// the context a send is decided and passed on with: nothing at once (the
// send goes on as if it waited), a cut once the grace has passed (a hung
// upstream is not held for ever; cutOff then keeps the send counted), and
// a release ends it at once.
func TestPassedOnOutlivesItsSender(t *testing.T) {
	ctx, hangUp := context.WithCancel(context.Background())
	r, release := passedOnWithin(httptest.NewRequest("POST", "/send", nil).WithContext(ctx), 50*time.Millisecond)
	defer release()
	hangUp()
	time.Sleep(10 * time.Millisecond)
	if cutOff(r) {
		t.Fatal("cut off as its sender went away, before the grace")
	}
	select {
	case <-r.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("not cut off 5 s after its sender went away, past a grace of 50 ms")
	}
	if !cutOff(r) {
		t.Error("cutOff is false once the grace has passed")
	}

	r2, release2 := passedOnWithin(httptest.NewRequest("POST", "/send", nil), time.Hour)
	release2()
	if r2.Context().Err() == nil {
		t.Error("a released request's context goes on")
	}
}

// TestPassedOnOnce proves that a request a cap set passed on is taken as
// it is by the cap sets after it: stacked, each added its grace to the
// one before (a probe's two cap sets cut a call at 60 s, and refunded one
// set's count and not the other's in between).
func TestPassedOnOnce(t *testing.T) {
	vars := map[string]any{}
	ctx := context.WithValue(context.Background(), caddyhttp.VarsCtxKey, vars)
	first, release := passedOnWithin(httptest.NewRequest("POST", "/send", nil).WithContext(ctx), time.Hour)
	defer release()
	second, release2 := passedOnWithin(first, time.Hour)
	defer release2()
	if second != first {
		t.Error("the second cap set passed on a request passed on already")
	}
}
