package caddymodule

import (
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// TestMemberBesideArrayOfMessages proves which dimensions beside a batch
// dimension that reads the body as an array of messages ({json.*.to}) are
// refused at their line for reading a member of the body, which an array
// has not: a plain one and a template's text part alike (a review's
// {json.*.to}/{json.campaign} admitted one message twice, once as an
// object and once in an array), with the batch dimension named as
// written, alternatives too. An index, another placeholder and escaped
// braces (text) load.
func TestMemberBesideArrayOfMessages(t *testing.T) {
	conf := func(batch, other string) string {
		return "frequency_cap {\n\tdimension r " + batch + "\n\tdimension other " + other + "\n\trule x {\n\t\tby r other\n\t\tlimit 1\n\t\twindow 1m\n\t}\n}"
	}
	for _, c := range []struct {
		batch, other, err string
	}{
		{"{json.*.to}", "{json.body}", `dimension other: "{json.body}" reads the body's member "body", but the batch dimension's {json.*.to} reads`},
		{"{json.*.to}", "{json.*.to}/{json.campaign}", `reads the body's member "campaign"`},
		{"{json.*.to} {json.*.tokens.*}", "{json.body}", `the batch dimension's {json.*.to} or {json.*.tokens.*} reads`},
		{"{json.*.to}", "{json.0.body}", ""},
		{"{json.*.to}", "{http.request.header.X-Channel}", ""},
		{"{json.*.to}", `\{json.body\}{http.request.header.X}`, ""},
		{"{json.messages.*.to}", "{json.campaign}", ""}, // an object body: its members are there
	} {
		var h Handler
		err := h.UnmarshalCaddyfile(caddyfile.NewTestDispenser(conf(c.batch, c.other)))
		if c.err == "" && err != nil || c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), "Testfile:3")) {
			t.Errorf("%s beside %s: %v; want %q at line 3", c.other, c.batch, err, c.err)
		}
	}
}
