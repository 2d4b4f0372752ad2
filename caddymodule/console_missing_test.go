package caddymodule_test

import (
	"fmt"
	"net/http"
	"testing"
)

// TestConsoleShowsMissingDimension: a dimension found in no request (a
// mistyped path under on_missing skip) is listed on the console with its
// placeholders in words once the first 100 requests are in, so the
// support page says that its rules capped nothing.
func TestConsoleShowsMissingDimension(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, fmt.Sprintf(`
	%s
	frequency_cap_console /support/*
	frequency_cap /push {
		name typo_%d
		key_prefix %s
		on_missing skip
		dimension device {json.mesage.token}
		dimension title {json.title}
		rule device_minute {
			by device
			limit 1000
			window 1m
		}
		rule title_minute {
			by title
			limit 1000
			window 1m
		}
	}
	reverse_proxy %s`, basicAuthBlock("/support/*"), prefixSeq.Add(1), testPrefix(), up.addr()))

	for i := 0; i < 100; i++ {
		expectStatus(t, g.send("/push", map[string]any{"message": map[string]any{"token": fmt.Sprint("d", i)}, "title": "hi"}), http.StatusOK)
	}
	a := g.consoleDo(http.MethodGet, "/support/api/capsets", true)
	expectStatus(t, a, http.StatusOK)
	var list capSetList
	if err := decodeStrict(a.body, &list); err != nil {
		t.Fatalf("%s: %v", a.body, err)
	}
	if len(list.CapSets) != 1 || len(list.CapSets[0].Missing) != 1 {
		t.Fatalf("capsets: %s", a.body)
	}
	if m := list.CapSets[0].Missing[0]; m.Dimension != "device" || m.Words != "JSON mesage.token" {
		t.Errorf("missing: %+v", m)
	}
}
