package support

import (
	"testing"
)

// TestConsoleRoute proves how the end of a path picks the endpoint.
func TestConsoleRoute(t *testing.T) {
	for _, tc := range []struct {
		path string
		want consoleEndpoint
		name string
	}{
		{"/", endpointPage, ""},
		{"", endpointPage, ""},
		{"/support", endpointPage, ""},
		{"/support/", endpointPage, ""},
		{"/a/b/index.html", endpointPage, ""},
		{"/api/capsets", endpointCapSets, ""},
		{"/support/api/capsets/", endpointCapSets, ""},
		{"/support/api/capsets/push/usage", endpointUsage, "push"},
		{"/api/capsets/a.b-c/usage", endpointUsage, "a.b-c"},
		{"/api/capsets//usage", endpointUnknown, ""},
		{"/api/capsets/push/used", endpointUnknown, ""},
		{"/api", endpointUnknown, ""},
		{"/support/api/x/y", endpointUnknown, ""},
	} {
		got, name := consoleRoute(tc.path)
		if got != tc.want || name != tc.name {
			t.Errorf("%q: %v %q, want %v %q", tc.path, got, name, tc.want, tc.name)
		}
	}
}
