package caddymodule

import (
	"bytes"
	"context"
	"encoding/json"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// fzErrLine finds the line a Caddyfile error names.
var fzErrLine = regexp.MustCompile(`, at Testfile:(\d+)`)

// FuzzCaddyfile feeds any text as the lines of a site block to Caddy's
// Caddyfile parser, and every frequency_cap directive it finds to
// UnmarshalCaddyfile, as `caddy run` and `caddy adapt` do. It never panics
// or hangs, and for each directive one of two things holds:
//
//   - it is refused with an error that names a line of the text, or
//   - it is accepted, its JSON decodes (unknown fields refused) to the
//     same Handler and encodes to the same JSON, and that Handler
//     provisions and validates: a config the Caddyfile accepts must never
//     fail later at load time with an error that names no line.
//
// The text may not use import, which would read files. A Redis config
// whose settings are placeholders resolves only at load time, so for it
// only the parse and the round trip are checked.
func FuzzCaddyfile(f *testing.F) {
	f.Add("frequency_cap {\n\tdimension recipient {json.to}\n\trule r {\n\t\tby recipient\n\t\tlimit 1\n\t\twindow 1m\n\t}\n}")
	f.Add("frequency_cap {\n\tredis {\n\t\taddress a:1\n\t\tcluster\n\t\tdb 3\n\t}\n\tdimension r {json.to}\n\trule x {\n\t\tby r\n\t\tlimit 1\n\t\twindow 1s\n\t}\n}")
	f.Add("frequency_cap {\n\tdimension r \" \"\n\trule x {\n\t\tby r\n\t\tlimit 1\n\t\twindow 1s\n\t}\n}")
	f.Add("frequency_cap {\n\trule x {\n\t\tby r\n\t}\n\tdimension r {json.to}\n}")
	f.Add("frequency_cap")
	f.Add("frequency_cap {\n\tbatch drop\n\tsplice expo\n\tmax_batch 10\n\texempt {json.*.p} otp\n\tdimension r {json.*.to}\n\tdimension c {json.*.body}\n\trule x {\n\t\tby r c\n\t\tlimit 1\n\t\twindow 1s\n\t\tcost {json.*.n}\n\t}\n}")
	f.Add("frequency_cap {\n\tdimension r {json.n.*.t.*}\n\tdimension c {json.n.*.m}\n\trule x {\n\t\tby c r\n\t\tlimit 1\n\t\tcalendar day {json.n.*.tz}\n\t}\n}")

	f.Fuzz(func(t *testing.T, text string) {
		if strings.Contains(text, "import") {
			return
		}
		site := ":80 {\n" + text + "\n}\n"
		blocks, err := caddyfile.Parse("Testfile", []byte(site))
		if err != nil {
			return // Caddy's own syntax errors
		}
		// The text starts on line 2 of the site; the site's closing brace,
		// which may close a block the text left open, is the last line.
		first, last := 2, 3+strings.Count(text, "\n")
		for _, sb := range blocks {
			for _, seg := range sb.Segments {
				if seg.Directive() == "frequency_cap" {
					fzCaddyfileDirective(t, seg, first, last)
				}
			}
		}
	})
}

// fzCaddyfileDirective checks one frequency_cap directive (see
// FuzzCaddyfile).
func fzCaddyfileDirective(t *testing.T, seg caddyfile.Segment, first, last int) {
	t.Helper()
	h := new(Handler)
	if err := h.UnmarshalCaddyfile(caddyfile.NewDispenser(seg)); err != nil {
		m := fzErrLine.FindStringSubmatch(err.Error())
		if m == nil {
			t.Fatalf("error names no line: %v", err)
		}
		if n, _ := strconv.Atoi(m[1]); n < first || n > last {
			t.Fatalf("error names line %d, outside the text's lines %d-%d: %v", n, first, last, err)
		}
		return
	}

	out, err := json.Marshal(h)
	if err != nil {
		t.Fatalf("encoding the accepted config: %v", err)
	}
	back := new(Handler)
	dec := json.NewDecoder(bytes.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(back); err != nil {
		t.Fatalf("decoding %s: %v", out, err)
	}
	if !reflect.DeepEqual(h, back) {
		t.Fatalf("JSON round trip changed the config:\n%+v\n%+v\nvia %s", h, back, out)
	}
	if again, _ := json.Marshal(back); !bytes.Equal(again, out) {
		t.Fatalf("JSON round trip changed the JSON:\n%s\n%s", out, again)
	}

	if back.Redis != nil {
		if fzHasPlaceholder(back.Redis) {
			return
		}
		c, err := back.Redis.resolve(caddy.NewReplacer())
		if err == nil {
			err = c.Validate()
		}
		if err != nil {
			t.Fatalf("the Caddyfile accepted a redis config that fails at load time: %v\n%s", err, out)
		}
		// The rest of Provision would build a client, which may read
		// files (tls_ca); the memory store stands in.
		back.Redis = nil
	}
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	err = back.Provision(ctx)
	if err == nil {
		err = back.Validate()
	}
	if cerr := back.Cleanup(); cerr != nil {
		t.Fatalf("cleanup: %v", cerr)
	}
	if err != nil {
		t.Fatalf("the Caddyfile accepted a config that fails at load time with no line: %v\n%s", err, out)
	}
}

// fzHasPlaceholder reports whether a Redis setting is left to load time.
func fzHasPlaceholder(c *RedisConfig) bool {
	for _, s := range append([]string{c.URL, c.SentinelMaster, c.Username, c.Password, c.TLSCA, c.TLSServerName}, c.Addresses...) {
		if isPlaceholder(s) {
			return true
		}
	}
	return false
}
