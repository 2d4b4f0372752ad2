package caddymodule_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"
)

// upstream is a push provider that records what it receives. It answers
// {"status":"queued"}, or the status named by the X-Want-Status header; a
// request whose body broke off before its end is no message, and is
// answered 400.
type upstream struct {
	*httptest.Server
	mu   sync.Mutex
	reqs []received
}

// received is one request as the upstream saw it.
type received struct {
	path          string
	body          []byte
	contentLength int64
	header        http.Header
	at            time.Time // when it arrived
	broken        bool      // its body broke off before its end
}

func startUpstream(t *testing.T) *upstream {
	u := &upstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		b, err := io.ReadAll(r.Body)
		u.mu.Lock()
		u.reqs = append(u.reqs, received{path: r.URL.Path, body: b, contentLength: r.ContentLength, header: r.Header.Clone(), at: at, broken: err != nil})
		u.mu.Unlock()
		if err != nil {
			http.Error(w, "incomplete", http.StatusBadRequest)
			return
		}
		w.Header().Set("X-Upstream", "push")
		w.Header().Set("Content-Type", "application/json")
		status := http.StatusOK
		if s := r.Header.Get("X-Want-Status"); s != "" {
			status, _ = strconv.Atoi(s)
		}
		w.WriteHeader(status)
		io.WriteString(w, `{"status":"queued"}`)
	}))
	t.Cleanup(u.Close)
	return u
}

// addr is the host:port reverse_proxy dials.
func (u *upstream) addr() string { return u.Listener.Addr().String() }

// count is how many requests arrived, whole or not.
func (u *upstream) count() int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return len(u.reqs)
}

// counts is how many requests arrived whole, and how many broke off.
func (u *upstream) counts() (whole, broken int) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, r := range u.reqs {
		if r.broken {
			broken++
		} else {
			whole++
		}
	}
	return whole, broken
}

func (u *upstream) last() received {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.reqs[len(u.reqs)-1]
}

// all returns a copy of every request so far.
func (u *upstream) all() []received {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([]received(nil), u.reqs...)
}
