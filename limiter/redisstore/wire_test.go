package redisstore

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/freqcap/caddy-freqcap/limiter/internal/recordlog"
	"github.com/freqcap/caddy-freqcap/lua"
)

// The constants the scripts share with Go are written once on each side,
// under the same name (OP_DECIDE in Lua is opDecide in Go): they must hold
// the same values, and a new upper-case constant in a script must be either
// shared (listed here) or said to be the script's own.
func TestWireConstantsMatchLua(t *testing.T) {
	shared := map[string]map[string]string{
		"freqcap.lua": {
			"OP_DECIDE":        opDecide,
			"OP_DECIDE_ALL":    opDecideAll,
			"OP_PEEK":          opPeek,
			"OP_REFUND":        opRefund,
			"OP_RESET":         opReset,
			"CLOCK_SKEW":       clockSkew,
			"KEY_SLACK":        strconv.Itoa(recordlog.KeySlack),
			"WIDE_RETENTION_S": strconv.Itoa(recordlog.WideRetentionS),
			"MAX_ENTRIES":      strconv.Itoa(recordlog.MaxEntries),
			"MAX_COST":         strconv.Itoa(recordlog.MaxCost),
			"EXEMPT_ANNEX":     luaEscape(recordlog.AppendExemptID(nil, nil)),
			"DECISION_EXEMPT":  strconv.Itoa(decisionExempt),
		},
		"commit.lua": {
			"WRITE_CHECK":  writeCheck,
			"WRITE_DELETE": writeDelete,
		},
	}
	// The scripts' own: the struct formats, and limits of Lua itself.
	own := map[string]bool{"HEADER": true, "CHUNK": true, "FULL": true, "EMPTY": true, "CORRUPT": true}
	sources := map[string]string{"freqcap.lua": lua.Freqcap, "commit.lua": lua.Commit}
	for file, want := range shared {
		got := luaConstants(t, sources[file])
		for name, v := range want {
			lv, ok := got[name]
			if !ok {
				t.Errorf("%s: %s is not declared", file, name)
			} else if lv != v {
				t.Errorf("%s: %s = %q; Go has %q", file, name, lv, v)
			}
		}
		for name := range got {
			if _, ok := want[name]; !ok && !own[name] {
				t.Errorf("%s: %s is neither shared with Go (list it here) nor the script's own", file, name)
			}
		}
	}
}

// luaEscape writes b as a Lua string literal's body: a control byte as a
// decimal escape.
func luaEscape(b []byte) string {
	var out strings.Builder
	for _, c := range b {
		if c < 0x20 {
			out.WriteString("\\" + strconv.Itoa(int(c)))
		} else {
			out.WriteByte(c)
		}
	}
	return out.String()
}

// luaDecl is a top-level declaration of upper-case locals:
// local A, B = 'a', 60000 -- a comment
var luaDecl = regexp.MustCompile(`(?m)^local ([A-Z][A-Z0-9_]*(?:, [A-Z][A-Z0-9_]*)*) = ([^\n]*?)\s*(?:--[^\n]*)?$`)

// luaConstants returns the upper-case locals a script declares at the top
// level, with their values: a number as written, a string unquoted, and
// anything else as written.
func luaConstants(t *testing.T, src string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, m := range luaDecl.FindAllStringSubmatch(src, -1) {
		names := strings.Split(m[1], ", ")
		values := splitLuaValues(m[2])
		if len(values) != len(names) {
			t.Fatalf("cannot read %q: %d names, %d values", m[0], len(names), len(values))
		}
		for i, name := range names {
			v := values[i]
			if len(v) >= 2 && (v[0] == '\'' || v[0] == '"') && v[len(v)-1] == v[0] {
				v = v[1 : len(v)-1]
			}
			out[name] = v
		}
	}
	return out
}

// splitLuaValues splits "a, 'b, c', {x = 1, y = 2}" at its top-level commas.
func splitLuaValues(s string) []string {
	var out []string
	depth, quote, start := 0, byte(0), 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '{' || c == '(':
			depth++
		case c == '}' || c == ')':
			depth--
		case c == ',' && depth == 0:
			out = append(out, strings.TrimSpace(s[start:i]))
			start = i + 1
		}
	}
	return append(out, strings.TrimSpace(s[start:]))
}
