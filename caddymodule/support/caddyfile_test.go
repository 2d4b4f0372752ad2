package support

import (
	"reflect"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
)

// TestConsoleUnmarshalCaddyfile proves the console's Caddyfile grammar.
func TestConsoleUnmarshalCaddyfile(t *testing.T) {
	for _, tc := range []struct {
		input string
		want  Console
		err   string
	}{
		{input: `frequency_cap_console`},
		{input: `frequency_cap_console {
		}`},
		{input: `frequency_cap_console {
			cap_sets push sms
			read_only
		}`, want: Console{CapSets: []string{"push", "sms"}, ReadOnly: true}},
		{input: `frequency_cap_console {
			user_header Remote-User
		}`, want: Console{UserHeader: "Remote-User"}},
		{input: `frequency_cap_console {
			public
		}`, want: Console{Public: true}},
		{input: `frequency_cap_console {
			public yes
		}`, err: "wrong argument count"},
		{input: `frequency_cap_console {
			user_header
		}`, err: "wrong argument count"},
		{input: `frequency_cap_console extra`, err: "wrong argument count"},
		{input: `frequency_cap_console {
			cap_sets
		}`, err: "wrong argument count"},
		{input: `frequency_cap_console {
			cap_sets push
			cap_sets sms
		}`, err: "cap_sets already specified"},
		{input: `frequency_cap_console {
			cap_sets {bad}
		}`, err: `invalid name "{bad}"`},
		{input: `frequency_cap_console {
			read_only yes
		}`, err: "wrong argument count"},
		{input: `frequency_cap_console {
			theme dark
		}`, err: `unrecognized subdirective "theme"`},
	} {
		var got Console
		err := got.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
		switch {
		case tc.err == "" && err != nil:
			t.Errorf("%s: %v", tc.input, err)
		case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
			t.Errorf("%s: error %v, want one containing %q", tc.input, err, tc.err)
		case tc.err == "" && !reflect.DeepEqual(got, tc.want):
			t.Errorf("%s: %+v, want %+v", tc.input, got, tc.want)
		}
	}
}
