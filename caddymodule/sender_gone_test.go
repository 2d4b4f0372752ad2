package caddymodule_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/internal/redistest"
)

// TestSenderGoneIsNoStoreFailure proves that a sender who hangs up while
// the store decides (here: the whole request sent, then its side of the
// connection closed, which ends the request's context once the gateway has
// read the body for {json.to}) is no store
// failure: no store error counted (the metric the monitoring example pages
// on), and no local decision under on_error local. A probe so raised the store errors by 34 in 40 sends, with Redis well,
// and logged the store failing.
func TestSenderGoneIsNoStoreFailure(t *testing.T) {
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer up.Close()
	redisLine := "redis {\n\t\t\turl " + redistest.URL(t) + "\n\t\t\ttimeout 2s\n\t\t}"
	g := startGateway(t, capBlock("/send", redisLine, "name gone", "on_error local", "dimension recipient {json.to}", ruleBlock("two", "recipient", 1000))+
		"\treverse_proxy "+strings.TrimPrefix(up.URL, "http://"))
	before, _ := scrape(t)
	for i := 0; i < 40; i++ {
		c := dialRaw(t, g)
		c.head("/send", "Content-Type: application/json", "Content-Length: 12")
		c.write(`{"to":"fay"}`)
		c.CloseWrite()
		c.SetReadDeadline(time.Now().Add(3 * time.Second))
		var b [512]byte
		c.Read(b[:]) // whatever comes, until the gateway closes
		c.Close()
	}
	after, _ := scrape(t)
	for _, s := range []string{storeErrors("gone", "decide"), series("caddy_frequency_cap_decisions_by_store_total", "handler", "gone", "store", "local")} {
		if d := after[s] - before[s]; d != 0 {
			t.Errorf("%s rose by %v over 40 sends whose senders went away", s, d)
		}
	}
}
