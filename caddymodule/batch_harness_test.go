package caddymodule_test

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// batchDenial is a refused batch's body: a denial's problem, and every
// denied entry.
type batchDenial struct {
	problem
	Denied []deniedEntry `json:"denied"`
}

// deniedEntry is one denied recipient entry in a batchDenial.
type deniedEntry struct {
	Path       string `json:"path"`
	Value      string `json:"value"`
	Rule       string `json:"rule"`
	RetryAfter int64  `json:"retry_after"`
}

// batchDenial decodes a refused batch's body, failing the test unless it
// is one.
func (a *answer) batchDenial(t *testing.T) batchDenial {
	t.Helper()
	if ct := a.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("denial Content-Type %q, want application/problem+json", ct)
	}
	var p batchDenial
	if err := decodeStrict(a.body, &p); err != nil {
		t.Fatalf("denial body is not a batch problem: %v: %s", err, a.body)
	}
	return p
}

// deniedPaths lists the paths of a batch denial's entries.
func (p batchDenial) deniedPaths() []string {
	out := make([]string, len(p.Denied))
	for i, e := range p.Denied {
		out[i] = e.Path
	}
	return out
}

// batchSeq names each batch test's cap set, for the admin API.
var batchSeq int

func batchName() string {
	batchSeq++
	return fmt.Sprintf("batch_%d", batchSeq)
}

// batchSeedSite is the seed config over an Expo batch, named name, with
// the store lines of strictStore and extra subdirectives: each recipient
// of each message is capped 15 a minute, 50 a day, and a content twice
// in 59 s.
func batchSeedSite(name, redisLine, upstream, extra string) string {
	return fmt.Sprintf(`
	frequency_cap /push/send* {
		name %s
		%s
		key_prefix %s
		%s
		dimension recipient {json.*.to}
		dimension content   {json.*.body}
		rule recipient_minute {
			by     recipient
			limit  15
			window 1m
		}
		rule recipient_day {
			by     recipient
			limit  50
			window 24h
		}
		rule same_content {
			by     recipient content
			limit  2
			window 59s
		}
	}
	reverse_proxy %s`, name, strictStore(redisLine), testPrefix(), extra, upstream)
}

// expoMessages is an Expo batch: one message per recipient, with body
// bodyOf(i).
func expoMessages(to []string, bodyOf func(i int) string) string {
	msgs := make([]map[string]any, len(to))
	for i, r := range to {
		msgs[i] = map[string]any{"to": r, "body": bodyOf(i), "title": "t"}
	}
	b, _ := json.Marshal(msgs)
	return string(b)
}

// repeat is n copies of s.
func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// numbered is the paths "<from>.to" ... "<to-1>.to".
func numbered(from, to int, suffix string) []string {
	var out []string
	for i := from; i < to; i++ {
		out = append(out, strconv.Itoa(i)+suffix)
	}
	return out
}

// expoUpstream is Expo's push API as the splice tests need it: it
// answers {"data": [ticket...]} with one ok ticket per recipient it
// received (a "to" string is one, an array one per element), in order,
// each ticket's id being the recipient. X-Want-Status sets the status;
// X-Want-Tickets, a count, answers that many tickets instead.
type expoUpstream struct {
	*httptest.Server
	mu     sync.Mutex
	bodies [][]byte
}

func startExpo(t *testing.T) *expoUpstream {
	u := &expoUpstream{}
	u.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		u.mu.Lock()
		u.bodies = append(u.bodies, b)
		u.mu.Unlock()
		type message struct {
			To json.RawMessage `json:"to"`
		}
		var msgs []message
		var one message
		if json.Unmarshal(b, &one) == nil {
			msgs = []message{one} // Expo takes one message as an object too
		} else if err := json.Unmarshal(b, &msgs); err != nil {
			http.Error(w, `{"errors":[{"code":"VALIDATION_ERROR"}]}`, http.StatusBadRequest)
			return
		}
		var ids []string
		for _, m := range msgs {
			var one string
			if json.Unmarshal(m.To, &one) == nil {
				ids = append(ids, one)
				continue
			}
			var many []string
			_ = json.Unmarshal(m.To, &many)
			ids = append(ids, many...)
		}
		if n := r.Header.Get("X-Want-Tickets"); n != "" {
			k, _ := strconv.Atoi(n)
			ids = repeat("x", k)
		}
		tickets := make([]string, len(ids))
		for i, id := range ids {
			tickets[i] = fmt.Sprintf(`{"status":"ok","id":%q}`, id)
		}
		w.Header().Set("Content-Type", "application/json")
		status := http.StatusOK
		if s := r.Header.Get("X-Want-Status"); s != "" {
			status, _ = strconv.Atoi(s)
		}
		w.WriteHeader(status)
		io.WriteString(w, `{"data":[`+strings.Join(tickets, ",")+`]}`)
	}))
	t.Cleanup(u.Close)
	return u
}

func (u *expoUpstream) addr() string { return u.Listener.Addr().String() }

// received is every body the upstream got, in order.
func (u *expoUpstream) received() [][]byte {
	u.mu.Lock()
	defer u.mu.Unlock()
	return append([][]byte(nil), u.bodies...)
}
