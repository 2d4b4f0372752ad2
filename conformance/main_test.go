package conformance_test

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/freqcap/caddy-freqcap/conformance"
)

func TestMain(m *testing.M) { os.Exit(conformance.Main(m)) }

// wireRequest is one HTTP request a Node SDK made, from Node's diagnostics
// channels (see node/lib.mjs).
type wireRequest struct {
	Method          string  `json:"method"`
	URL             string  `json:"url"`
	ContentEncoding *string `json:"contentEncoding"`
	Status          *int    `json:"status"`
}

// nodeOutput is what every driver in node/ prints.
type nodeOutput[R any] struct {
	SDK     string `json:"sdk"`
	Version string `json:"version"`
	Node    string `json:"node"`
	Results []R    `json:"results"`
}

// oneRequest checks that an SDK call made exactly one HTTP request (no
// retry) and that it was answered with status.
func oneRequest(t *testing.T, what string, wire []wireRequest, status int) {
	t.Helper()
	if len(wire) != 1 {
		t.Errorf("%s: the SDK made %d HTTP requests, want exactly 1 (no retry): %s", what, len(wire), jsonString(wire))
		return
	}
	if wire[0].Status == nil || *wire[0].Status != status {
		t.Errorf("%s: the request was answered %s, want %d", what, statusString(wire[0].Status), status)
	}
}

func statusString(s *int) string {
	if s == nil {
		return "with no status"
	}
	b, _ := json.Marshal(*s)
	return string(b)
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
