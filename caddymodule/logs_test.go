package caddymodule

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
	"go.uber.org/zap/zaptest/observer"

	"github.com/freqcap/caddy-freqcap/limiter"
)

// observed provisions a handler from JSON with its logs going to an
// observer that keeps every level, and store warnings every interval.
func observed(t *testing.T, cfg string, interval time.Duration) (*Handler, *observer.ObservedLogs) {
	t.Helper()
	h, err := load(t, cfg)
	if err != nil {
		t.Fatal(err)
	}
	core, logs := observer.New(zapcore.DebugLevel)
	h.logger = zap.New(core)
	h.warns.logger, h.warns.interval = h.logger, interval
	return h, logs
}

// serve runs one request with a JSON body through h, as Caddy would.
func serve(t *testing.T, h *Handler, body string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest(http.MethodPost, "/", strings.NewReader(body))
	repl := caddy.NewReplacer()
	r = r.WithContext(context.WithValue(r.Context(), caddy.ReplacerCtxKey, repl))
	w := httptest.NewRecorder()
	next := caddyhttp.HandlerFunc(func(w http.ResponseWriter, r *http.Request) error {
		w.WriteHeader(http.StatusOK)
		return nil
	})
	if err := h.ServeHTTP(w, r, next); err != nil {
		t.Fatalf("ServeHTTP: %v", err)
	}
	return w
}

func fieldsOf(e observer.LoggedEntry) map[string]any { return e.ContextMap() }

// TestDenialLogs proves a denial is logged once, at debug, with the
// handler's name and the denying rule, and without dimension values
// unless log_values is set; that under dry_run the denial that did not
// happen is logged at info instead; and that an admission logs nothing.
func TestDenialLogs(t *testing.T) {
	for _, tc := range []struct {
		name, extra string
		level       zapcore.Level
		msg         string
		values      bool
	}{
		{"live", ``, zapcore.DebugLevel, "denied", false},
		{"log_values", `"log_values": true,`, zapcore.DebugLevel, "denied", true},
		{"dry_run", `"dry_run": true,`, zapcore.InfoLevel, "dry run: would deny", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h, logs := observed(t, `{"name": "logs", "key_prefix": "logs-`+tc.name+`:", `+tc.extra+`
				"dimensions": {"recipient": "{json.to}", "content": "{json.content}"},
				"rules": [{"name": "once", "by": ["recipient"], "limit": 1, "window": "1m"},
				          {"name": "same", "by": ["recipient", "content"], "limit": 1, "window": "1m"}]}`, time.Second)
			msg := `{"to": "alice-secret", "content": "hello"}`
			serve(t, h, msg)
			if n := logs.Len(); n != 0 {
				t.Fatalf("an admission logged %d lines: %v", n, logs.All())
			}
			w := serve(t, h, msg)
			if tc.name != "dry_run" && w.Code != http.StatusTooManyRequests {
				t.Fatalf("status %d", w.Code)
			}
			all := logs.All()
			if len(all) != 1 {
				t.Fatalf("%d log lines, want 1: %v", len(all), all)
			}
			e := all[0]
			f := fieldsOf(e)
			if e.Level != tc.level || e.Message != tc.msg || f["handler"] != "logs" || f["rule"] == nil {
				t.Errorf("logged %s %q %v", e.Level, e.Message, f)
			}
			if also, _ := f["also_denied_by"].([]any); len(also) != 1 {
				t.Errorf("also_denied_by %v, want the other denying rule", f["also_denied_by"])
			}
			values, has := f["values"].(map[string]any)
			if has != tc.values {
				t.Errorf("values logged: %v, want %v", has, tc.values)
			}
			if tc.values && (values["recipient"] != "alice-secret" || values["content"] != "hello") {
				t.Errorf("values %v", values)
			}
			if !tc.values && strings.Contains(fmt.Sprint(f), "alice-secret") {
				t.Errorf("the recipient was logged without log_values: %v", f)
			}
		})
	}
}

// failingStore fails every call, as a Redis that is down does.
type failingStore struct{ limiter.Store }

var errDown = errors.New("connection refused")

func (failingStore) Decide(context.Context, *limiter.Request) (*limiter.Decision, error) {
	return nil, errDown
}

// TestStoreWarningsCollapse proves that during an outage the store
// failures are logged at warn as one line at once, then one line per
// interval with the count of failures in it, and a final count after the
// outage; never a line per request, and every failure counted once.
func TestStoreWarningsCollapse(t *testing.T) {
	const interval = 150 * time.Millisecond
	h, logs := observed(t, `{"name": "outage", "on_error": "allow",
		"dimensions": {"recipient": "{json.to}"},
		"rules": [{"name": "r", "by": ["recipient"], "limit": 1, "window": "1m"}]}`, interval)
	h.store = failingStore{}

	total := 0
	deadline := time.Now().Add(2*interval + interval/2)
	for time.Now().Before(deadline) {
		if w := serve(t, h, `{"to": "alice"}`); w.Code != http.StatusOK {
			t.Fatalf("on_error allow answered %d", w.Code)
		}
		total++
		time.Sleep(time.Millisecond)
	}
	time.Sleep(3 * interval)

	// One line at once, one per interval that saw failures: at most 4
	// over 2.5 intervals; fewer only if the timers ran late.
	lines := logs.All()
	if len(lines) < 2 || len(lines) > 4 || total < 10*len(lines) {
		t.Fatalf("%d failed requests over %s gave %d lines, want 2 to 4: %v", total, 2*interval+interval/2, len(lines), lines)
	}
	var sum int64
	for i, e := range lines {
		f := fieldsOf(e)
		n, _ := f["failures"].(int64)
		if e.Level != zapcore.WarnLevel || e.Message != "frequency cap store failing" || f["handler"] != "outage" ||
			f["op"] != "decide" || f["on_error"] != "allow" || f["error"] != errDown.Error() || n < 1 {
			t.Errorf("line %d: %s %q %v", i, e.Level, e.Message, f)
		}
		if f["interval"] != interval {
			t.Errorf("line %d: interval %v", i, f["interval"])
		}
		if i == 0 && n != 1 {
			t.Errorf("the first line counts %d failures, want 1", n)
		}
		sum += n
	}
	if sum != int64(total) {
		t.Errorf("the lines count %d failures, want %d", sum, total)
	}
}
