package caddymodule_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// TestAdminAnswersDoNotMislead proves the admin API's answers read as
// support staff expect: a phone number typed with its '+' finds that
// recipient's usage (and %2B still does; %20 is a space), /frequency_cap/
// lists the cap sets with their dimensions, a quiet rule's by is [] (not
// null), a 404 shows <name> as written, and usage by recipient alone
// says which rules it selected.
func TestAdminAnswersDoNotMislead(t *testing.T) {
	up := startUpstream(t)
	name := "sms_" + strings.ReplaceAll(testPrefix(), ":", "")
	g := startGateway(t, fmt.Sprintf(`
	frequency_cap {
		name %s
		key_prefix %s
		dimension recipient {json.to}
		rule night {
			quiet 23:00-07:00 UTC
		}
		rule day {
			by     recipient
			limit  5
			window 24h
		}
	}
	reverse_proxy %s`, name, testPrefix(), up.addr()))
	// Outside 23:00-07:00 UTC the send is admitted; inside it, denied:
	// either way the usage below is read, not the send's answer.
	g.send("/", map[string]any{"to": "+15550100"})
	u := usageOf(t, name, "recipient=+15550100")
	u2 := usageOf(t, name, "recipient=%2B15550100")
	if u["day"].Used != u2["day"].Used {
		t.Errorf("+15550100 used %d, %%2B15550100 used %d: a '+' must be the plus of the number", u["day"].Used, u2["day"].Used)
	}
	if u["night"].By == nil {
		t.Errorf("the quiet rule's by is null")
	}
	raw := adminDo(t, http.MethodGet, "/frequency_cap/"+name+"/usage?recipient=+15550100")
	if !strings.Contains(string(raw.body), `"by":[]`) {
		t.Errorf("quiet rule: %s", raw.body)
	}

	a := adminDo(t, http.MethodGet, "/frequency_cap/")
	expectStatus(t, a, http.StatusOK)
	var list struct {
		CapSets []capSetEntry `json:"capsets"`
	}
	if err := json.Unmarshal(a.body, &list); err != nil {
		t.Fatal(err)
	}
	found := false
	for _, cs := range list.CapSets {
		if cs.Name == name {
			found = len(cs.Dimensions) == 1 && cs.Dimensions[0] == "recipient" && len(cs.Rules) == 2
		}
	}
	if !found {
		t.Errorf("/frequency_cap/ does not list %s with its dimension and rules: %s", name, a.body)
	}

	a = adminDo(t, http.MethodGet, "/frequency_cap/nowhere")
	expectStatus(t, a, http.StatusNotFound)
	if !strings.Contains(string(a.body), "/frequency_cap/<name>/usage") {
		t.Errorf("404: %s", a.body)
	}
}
