package caddymodule

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// TestPassedOnOutlivesItsSender proves what a sender's going away does to
// the context a send is decided and passed on with: nothing at once (the
// send goes on as if the sender waited), a cut once the grace has passed
// (a hung upstream is not held for ever), and a release ends it at once.
func TestPassedOnOutlivesItsSender(t *testing.T) {
	ctx, hangUp := context.WithCancel(context.Background())
	r, p := passedOnWithin(httptest.NewRequest("POST", "/send", nil).WithContext(ctx), 50*time.Millisecond)
	defer p.release()
	hangUp()
	time.Sleep(10 * time.Millisecond)
	if r.Context().Err() != nil {
		t.Fatal("ended as its sender went away, before the grace")
	}
	select {
	case <-r.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("not cut off 5 s after its sender went away, past a grace of 50 ms")
	}

	r2, p2 := passedOnWithin(httptest.NewRequest("POST", "/send", nil), time.Hour)
	p2.release()
	if r2.Context().Err() == nil {
		t.Error("a released request's context goes on")
	}
}

// TestPassedOnOnce proves that a request a cap set passed on is taken as
// it is by the cap sets after it in the route: each added its grace to
// the one before (a probe's two cap sets cut a call at 60 s, one set
// refunding and the other not in between).
func TestPassedOnOnce(t *testing.T) {
	ctx := context.WithValue(context.Background(), caddyhttp.VarsCtxKey, map[string]any{})
	first, p := passedOnWithin(httptest.NewRequest("POST", "/send", nil).WithContext(ctx), time.Hour)
	defer p.release()
	second, p2 := passedOnWithin(first, time.Hour)
	p2.release() // nil: nothing to release
	if second != first || first.Context().Err() != nil {
		t.Error("the second cap set passed on anew a request passed on already")
	}
}

// TestPassOnSaysCut proves that passOn says a call was cut off when its
// context ended while it ran (the grace past), and not otherwise.
func TestPassOnSaysCut(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var end func()
	next := &passOn{next: handlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		if end != nil {
			end()
		}
		return nil
	})}
	r := httptest.NewRequest("POST", "/send", nil).WithContext(ctx)
	next.ServeHTTP(httptest.NewRecorder(), r)
	if next.cut {
		t.Error("a call that ran whole: cut")
	}
	end = cancel
	next.ServeHTTP(httptest.NewRecorder(), r)
	if !next.cut {
		t.Error("a call whose context ended while it ran: not cut")
	}
}

// handlerFunc is a caddyhttp.Handler of a func.
type handlerFunc func(http.ResponseWriter, *http.Request) error

func (f handlerFunc) ServeHTTP(w http.ResponseWriter, r *http.Request) error { return f(w, r) }
