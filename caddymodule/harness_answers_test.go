package caddymodule_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// answer is a response read whole.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// problem is a denial's body as a client reads it: application/problem+json
// (RFC 9457) with the members docs/configuration.md documents.
type problem struct {
	Type       string      `json:"type"`
	Title      string      `json:"title"`
	Status     int         `json:"status"`
	Detail     string      `json:"detail"`
	Rule       string      `json:"rule"`
	Limit      int64       `json:"limit"`
	Window     string      `json:"window"`
	RetryAfter int64       `json:"retry_after"`
	Violated   []violation `json:"violated"`
}

// violation is one rule that refused a request, in a problem's violated.
type violation struct {
	Rule       string `json:"rule"`
	Limit      int64  `json:"limit"`
	Used       int64  `json:"used"`
	Remaining  int64  `json:"remaining"`
	Window     string `json:"window"`
	RetryAfter int64  `json:"retry_after"`
}

// failure is the JSON body of every other refusal (400, 413, 503) and of
// the admin API's errors.
type failure struct {
	Error     string `json:"error"`
	Dimension string `json:"dimension"`
	Rule      string `json:"rule"`
	Name      string `json:"name"` // the admin API's unknown handler
}

// usage is the admin API's answer to GET .../usage.
type usage struct {
	Name  string      `json:"name"`
	Now   string      `json:"now"`
	Rules []ruleUsage `json:"rules"`
}

// ruleUsage is one rule in a usage answer.
type ruleUsage struct {
	Rule       string   `json:"rule"`
	By         []string `json:"by"`
	Limit      int64    `json:"limit"`
	Window     string   `json:"window"`
	Used       int64    `json:"used"`
	Remaining  int64    `json:"remaining"`
	ResetAfter int64    `json:"reset_after"`
	// Quiet and QuietUntil are a quiet rule's: whether the recipient is in
	// its range, and the seconds until it ends.
	Quiet      *bool  `json:"quiet"`
	QuietUntil *int64 `json:"quiet_until"`
	DryRun     bool   `json:"dry_run"`
	// From, Sends and Precision are a counting rule's timeline.
	From  string `json:"from"`
	Sends []struct {
		At     string `json:"at"`
		Units  int64  `json:"units"`
		Exempt int64  `json:"exempt"`
	} `json:"sends"`
	Precision string `json:"precision"`
	// Exempt is how much of Used exempt sends made.
	Exempt *int64 `json:"exempt"`
	// Assumed are the values the answer was not given (a zone, limit or
	// cost placeholder) and what it assumed; Cost, Admits and RetryAfter
	// answer for a send of the cost given.
	Assumed []struct {
		Kind  string `json:"kind"`
		Param string `json:"param"`
		Value string `json:"value"`
		Note  string `json:"note"`
	} `json:"assumed"`
	Cost       *int64 `json:"cost"`
	Admits     *bool  `json:"admits"`
	RetryAfter *int64 `json:"retry_after"`
}

// reset is the admin API's answer to DELETE .../usage.
type reset struct {
	Name      string   `json:"name"`
	Reset     []string `json:"reset"`
	Kept      []string `json:"kept"`
	Untouched []struct {
		Rule  string   `json:"rule"`
		Needs []string `json:"needs"`
	} `json:"untouched"`
}

// decodeStrict decodes a whole JSON body into v, refusing members v does
// not know: the test-side types mirror the answers exactly.
func decodeStrict(body []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if dec.More() {
		return fmt.Errorf("more than one JSON value")
	}
	return nil
}

// problem decodes a denial's body, failing the test unless it is one.
func (a *answer) problem(t *testing.T) problem {
	t.Helper()
	if ct := a.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Errorf("denial Content-Type %q, want application/problem+json", ct)
	}
	var p problem
	if err := decodeStrict(a.body, &p); err != nil {
		t.Fatalf("denial body is not a problem: %v: %s", err, a.body)
	}
	return p
}

// failure decodes a refusal's JSON body, failing the test unless it is one.
func (a *answer) failure(t *testing.T) failure {
	t.Helper()
	if ct := a.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q, want application/json", ct)
	}
	var f failure
	if err := decodeStrict(a.body, &f); err != nil {
		t.Fatalf("answer body is not a failure: %v: %s", err, a.body)
	}
	return f
}

// expectStatus fails the test unless a has the status.
func expectStatus(t *testing.T, a *answer, status int) {
	t.Helper()
	if a.status != status {
		t.Fatalf("status %d, want %d; body %s", a.status, status, bytes.TrimSpace(a.body))
	}
}

// expectFailure fails the test unless a is a JSON failure of the status
// whose reason contains reason, and returns it.
func expectFailure(t *testing.T, a *answer, status int, reason string) failure {
	t.Helper()
	expectStatus(t, a, status)
	f := a.failure(t)
	if !strings.Contains(f.Error, reason) {
		t.Errorf("error %q, want it to contain %q", f.Error, reason)
	}
	return f
}

// adminDo sends a request to the running Caddy's admin endpoint.
func adminDo(t *testing.T, method, path string) *answer {
	t.Helper()
	req, err := http.NewRequest(method, fmt.Sprintf("http://localhost:%d%s", adminPort(t), path), nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := adminClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatalf("reading answer: %v", err)
	}
	return &answer{status: res.StatusCode, header: res.Header, body: b}
}

// usageOf GETs the usage and returns it by rule.
func usageOf(t *testing.T, name, query string) map[string]ruleUsage {
	t.Helper()
	a := adminDo(t, http.MethodGet, "/frequency_cap/"+name+"/usage?"+query)
	expectStatus(t, a, http.StatusOK)
	if ct := a.header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("Content-Type %q", ct)
	}
	var u usage
	if err := decodeStrict(a.body, &u); err != nil {
		t.Fatalf("usage answer %s: %v", a.body, err)
	}
	if u.Name != name {
		t.Errorf("usage answer names %q, want %q", u.Name, name)
	}
	out := make(map[string]ruleUsage, len(u.Rules))
	for _, r := range u.Rules {
		out[r.Rule] = r
	}
	return out
}

// resetUsage DELETEs the usage and returns the answer.
func resetUsage(t *testing.T, name, query string) reset {
	t.Helper()
	a := adminDo(t, http.MethodDelete, "/frequency_cap/"+name+"/usage?"+query)
	expectStatus(t, a, http.StatusOK)
	var r reset
	if err := decodeStrict(a.body, &r); err != nil {
		t.Fatalf("reset answer %s: %v", a.body, err)
	}
	return r
}

// expectUsage checks the rules answered, and used and remaining of each.
func expectUsage(t *testing.T, got map[string]ruleUsage, want map[string][2]int64) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("usage answers %d rules %v, want %d", len(got), got, len(want))
	}
	for rule, w := range want {
		r, ok := got[rule]
		if !ok {
			t.Errorf("usage has no rule %s", rule)
			continue
		}
		if r.Used != w[0] || r.Remaining != w[1] || r.Remaining != r.Limit-r.Used {
			t.Errorf("%s: used %d remaining %d of %d, want used %d remaining %d", rule, r.Used, r.Remaining, r.Limit, w[0], w[1])
		}
	}
}
