package caddymodule_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddytest"

	"github.com/freqcap/caddy-freqcap/caddymodule"
)

// TestCaddyfileAdapt proves that each testdata/*.caddyfiletest Caddyfile
// adapts to exactly the JSON below its "----------" line (or fails with
// the error text there), and that the JSON of every frequency_cap handler
// survives a decode and encode unchanged: the JSON form is the whole
// configuration.
func TestCaddyfileAdapt(t *testing.T) {
	files, err := filepath.Glob("testdata/*.caddyfiletest")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata/*.caddyfiletest files: %v", err)
	}
	for _, file := range files {
		t.Run(filepath.Base(file), func(t *testing.T) {
			data, err := os.ReadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			caddyfile, expected, ok := strings.Cut(string(data), "----------")
			if !ok {
				t.Fatalf("%s has no ---------- line", file)
			}
			caddyfile, expected = strings.TrimSpace(caddyfile)+"\n", strings.TrimSpace(expected)
			if !strings.HasPrefix(expected, "{") {
				_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(caddyfile), nil)
				if err == nil || !strings.Contains(err.Error(), expected) {
					t.Fatalf("adapting: got error %v, want one containing %q", err, expected)
				}
				return
			}
			if !caddytest.CompareAdapt(t, file, caddyfile, "caddyfile", expected) {
				t.Fatalf("adapted JSON differs from %s (diff on stdout)", file)
			}
			handlers := findHandlers(t, []byte(expected))
			if len(handlers) == 0 {
				t.Fatal("no frequency_cap handler in the expected JSON")
			}
			for _, raw := range handlers {
				var h caddymodule.Handler
				dec := json.NewDecoder(bytes.NewReader(raw))
				dec.DisallowUnknownFields()
				if err := dec.Decode(&struct {
					*caddymodule.Handler
					Name string `json:"handler"`
				}{Handler: &h}); err != nil {
					t.Fatalf("decoding handler JSON: %v", err)
				}
				again, err := json.Marshal(&h)
				if err != nil {
					t.Fatal(err)
				}
				var want, got map[string]any
				_ = json.Unmarshal(raw, &want)
				_ = json.Unmarshal(again, &got)
				delete(want, "handler")
				w, _ := json.Marshal(want)
				g, _ := json.Marshal(got)
				if string(w) != string(g) {
					t.Errorf("JSON round trip changed the handler:\n got  %s\n want %s", g, w)
				}
			}
		})
	}
}

// findHandlers returns every object with "handler": "frequency_cap".
func findHandlers(t *testing.T, cfg []byte) []json.RawMessage {
	var out []json.RawMessage
	var walk func(v any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			if x["handler"] == "frequency_cap" {
				raw, err := json.Marshal(x)
				if err != nil {
					t.Fatal(err)
				}
				out = append(out, raw)
			}
			for _, c := range x {
				walk(c)
			}
		case []any:
			for _, c := range x {
				walk(c)
			}
		}
	}
	var v any
	if err := json.Unmarshal(cfg, &v); err != nil {
		t.Fatalf("expected JSON does not parse: %v", err)
	}
	walk(v)
	return out
}
