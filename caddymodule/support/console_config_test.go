package support

import (
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	_ "github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
)

// TestConsoleExactPathRefused proves that a console mounted on an exact
// path is a config error naming the fix: it served its page there, but the
// page's API calls beneath it went on to the next handler (an upstream
// answered them 200 with nothing), so the console could not work. A path
// with a wildcard loads.
func TestConsoleExactPathRefused(t *testing.T) {
	adapt := func(site string) error {
		_, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(":8080 {\nroute {\n"+site+"\n}\n}\n"), nil)
		return err
	}
	for _, bad := range []string{"frequency_cap_console /support", "frequency_cap_console /support/"} {
		err := adapt(bad)
		if err == nil || !strings.Contains(err.Error(), "write /support/*") {
			t.Errorf("%s: %v, want an error naming /support/*", bad, err)
		}
	}
	for _, good := range []string{"frequency_cap_console /support/*", "frequency_cap_console /support*", "frequency_cap_console"} {
		if err := adapt(good); err != nil {
			t.Errorf("%s: %v", good, err)
		}
	}
}

// TestConsoleUserHeaderChecked proves that a user_header no request can
// carry (every request would get 403), or one beside public (never read),
// is refused.
func TestConsoleUserHeaderChecked(t *testing.T) {
	for _, tc := range []struct {
		c   Console
		err string
	}{
		{Console{UserHeader: "Remote-User"}, ""},
		{Console{UserHeader: "Bad Header"}, "is no header field name"},
		{Console{UserHeader: "X:User"}, "is no header field name"},
		{Console{UserHeader: "Remote-User", Public: true}, "user_header would never be read"},
		{Console{Public: true}, ""},
	} {
		err := tc.c.Validate()
		if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
			t.Errorf("%+v: %v, want %q", tc.c, err, tc.err)
		}
	}
}
