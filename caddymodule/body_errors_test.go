package caddymodule_test

import (
	"net/http"
	"strings"
	"testing"
)

// TestBodyErrorsSayWhatIsWrong proves that two bodies a probe found
// refused in words that did not help are refused in words that do: a
// JSON body that starts with a byte order mark (it read "invalid
// character 'ï'"), and a Content-Type that does not parse (it told the
// sender to send the type it had sent). Neither counts anything.
func TestBodyErrorsSayWhatIsWrong(t *testing.T) {
	up := startUpstream(t)
	g := startGateway(t, capBlock("/send", "", "dimension recipient {json.to}", ruleBlock("once", "recipient", 1))+
		"\treverse_proxy "+up.addr())
	expectFailure(t, g.post("/send", "application/json", "\uFEFF"+`{"to":"ivy"}`), http.StatusBadRequest, "starts with a byte order mark")
	a := g.post("/send", "application/json; foo", `{"to":"ivy"}`)
	expectFailure(t, a, http.StatusUnsupportedMediaType, `declares Content-Type "application/json; foo", which does not parse`)
	if strings.Contains(string(a.body), "send it as application/json") {
		t.Errorf("415 tells the sender to send what it sent: %s", a.body)
	}
	expectStatus(t, g.post("/send", "application/json", `{"to":"ivy"}`), http.StatusOK)

	// A form cap set given a multipart body without its Content-Type:
	// the answer says the body is read as a form (it said only "invalid
	// semicolon separator in query").
	g2 := startGateway(t, capBlock("/form", "", "dimension recipient {form.To}", ruleBlock("once_form", "recipient", 1))+
		"\treverse_proxy "+up.addr())
	expectFailure(t, g2.post("/form", "", "--b\r\nContent-Disposition: form-data; name=\"To\"\r\n\r\nann\r\n--b--\r\n"), http.StatusBadRequest,
		"as a body that declares no Content-Type is read")
}
