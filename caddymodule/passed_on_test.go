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
// the context a send is passed on with once it had gone: nothing at once
// (the send goes on as if it waited), a cut once the grace has passed (a
// hung upstream is not held for ever), and a release ends it at once.
func TestPassedOnOutlivesItsSender(t *testing.T) {
	ctx, hangUp := context.WithCancel(context.Background())
	hangUp()
	r, release := passedOn(httptest.NewRequest("POST", "/send", nil).WithContext(ctx), 50*time.Millisecond)
	defer release()
	if r.Context().Err() != nil {
		t.Fatal("ended as its sender had gone, before the grace")
	}
	select {
	case <-r.Context().Done():
	case <-time.After(5 * time.Second):
		t.Fatal("not ended 5 s after it was passed on, past a grace of 50 ms")
	}

	r2, release2 := passedOn(httptest.NewRequest("POST", "/send", nil), time.Hour)
	release2()
	if r2.Context().Err() == nil {
		t.Error("a released request's context goes on")
	}
}

// TestPassOnLooksWhenItPasses proves passOn: a request whose sender is
// there goes on as it is (nothing made, where nearly every sender
// waits), and is cut when the sender leaves during the call; one whose
// sender has gone goes on with a context that has not ended, so the
// upstream gets it and it is not cut; and a cap set after the first (a
// request passed on already) passes it as it is.
func TestPassOnLooksWhenItPasses(t *testing.T) {
	var got *http.Request
	var gotErr error // got's context's, during the call
	var leave func()
	next := &passOn{next: handlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		got, gotErr = r, r.Context().Err()
		if leave != nil {
			leave()
		}
		return nil
	})}

	ctx, cancel := context.WithCancel(context.Background())
	r := httptest.NewRequest("POST", "/send", nil).WithContext(ctx)
	next.ServeHTTP(httptest.NewRecorder(), r)
	if got != r || next.cut {
		t.Errorf("a waiting sender's request: passed as it is %v, cut %v", got == r, next.cut)
	}
	leave = cancel
	next.ServeHTTP(httptest.NewRecorder(), r)
	if !next.cut {
		t.Error("a sender that left during the call: not cut")
	}

	leave = nil
	next.ServeHTTP(httptest.NewRecorder(), r) // its sender gone before
	if got == r || gotErr != nil || next.cut {
		t.Errorf("a gone sender's request: passed as it is %v, its context %v, cut %v", got == r, gotErr, next.cut)
	}

	// Two cap sets in one route: the second runs inside the first.
	var atSecond *http.Request
	second := &passOn{next: handlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		got = r
		return nil
	})}
	first := &passOn{next: handlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		atSecond = r
		return second.ServeHTTP(w, r)
	})}
	first.ServeHTTP(httptest.NewRecorder(), r)
	if got != atSecond {
		t.Error("a cap set after the first passed on anew a request passed on already")
	}

	// The sender leaves while the second cap set decides: the second
	// passes it on anew, the upstream answers, and neither set is cut
	// (the first said cut, the second not: one refunded, one kept).
	vars := map[string]any{}
	ctx2, cancel2 := context.WithCancel(context.WithValue(context.Background(), caddyhttp.VarsCtxKey, vars))
	second = &passOn{next: handlerFunc(func(w http.ResponseWriter, r *http.Request) error { return nil })}
	first = &passOn{next: handlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		cancel2()
		return second.ServeHTTP(w, r)
	})}
	first.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("POST", "/send", nil).WithContext(ctx2))
	if first.cut || second.cut {
		t.Errorf("cut: first %v, second %v; want neither", first.cut, second.cut)
	}
}

// handlerFunc is a caddyhttp.Handler of a func.
type handlerFunc func(http.ResponseWriter, *http.Request) error

func (f handlerFunc) ServeHTTP(w http.ResponseWriter, r *http.Request) error { return f(w, r) }
