package conformance_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/freqcap/caddy-freqcap/conformance"
	"github.com/freqcap/caddy-freqcap/conformance/gorush"
)

// gorushSite is the gorush gateway: every token of every notification is
// capped on its own at 2 a minute; capped tokens are dropped from the
// body passed on and reported in gorush's answer as failed-push logs
// (answer gorush under batch drop); a push whose tokens are all capped is
// answered by the gateway itself in gorush's shape.
const gorushSite = `http://127.0.0.1:%d {
	frequency_cap ` + conformance.GorushPushPath + ` {
		name gorush_%[2]s
		key_prefix gorush_%[2]s:
		batch drop
		answer gorush
		max_batch 10
		dimension token {json.notifications.*.tokens.*}
		rule token_minute {
			by token
			limit 2
			window 1m
		}
	}
	reverse_proxy %[3]s
}
`

// gorushClient sends pushes as a Go client of gorush does: a
// gorush.RequestPush marshalled with encoding/json, POSTed as
// application/json to /api/push; the answer is decoded into gorush's
// Response (2xx) or ErrorResponse, refusing members gorush does not write.
type gorushClient struct {
	t    *testing.T
	base string
}

type gorushReply struct {
	status int
	header http.Header
	body   []byte
	ok     gorush.Response
	err    gorush.ErrorResponse
}

func (c gorushClient) push(notifications ...gorush.PushNotification) gorushReply {
	c.t.Helper()
	body, err := json.Marshal(gorush.RequestPush{Notifications: notifications})
	if err != nil {
		c.t.Fatal(err)
	}
	return c.post(body)
}

func (c gorushClient) post(body []byte) gorushReply {
	c.t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	res, err := client.Post(c.base+conformance.GorushPushPath, "application/json", bytes.NewReader(body))
	if err != nil {
		c.t.Fatal(err)
	}
	defer res.Body.Close()
	r := gorushReply{status: res.StatusCode, header: res.Header}
	if r.body, err = io.ReadAll(res.Body); err != nil {
		c.t.Fatal(err)
	}
	var into any = &r.err
	if res.StatusCode/100 == 2 {
		into = &r.ok
	}
	dec := json.NewDecoder(bytes.NewReader(r.body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(into); err != nil {
		c.t.Fatalf("%d %s is not gorush's answer: %v", res.StatusCode, r.body, err)
	}
	return r
}

// TestGorush proves, with gorush's own request and answer types (copied
// in conformance/gorush) through a real Caddy, against a mock gorush in
// sync mode (which logs the tokens its provider refuses) and in async
// mode (empty logs): pushes under the cap are gorush's answers as they
// came; a push with capped tokens reaches gorush without them and its
// answer comes back with a failed-push LogPushEntry for each (the token,
// the notification's notif_id, platform and message, the rule in the
// error) after gorush's own logs, counted in counts; a push whose every
// token is capped is a 200 Response from the gateway alone; gorush got
// exactly the admitted tokens. A body the gateway cannot read and a push
// past max_batch are gorush's ErrorResponse with the status as code.
func TestGorush(t *testing.T) {
	syncMock, asyncMock := &conformance.Gorush{Sync: true}, &conformance.Gorush{}
	syncPort, asyncPort := conformance.FreePort(t), conformance.FreePort(t)
	gw := conformance.StartGateway(t, fmt.Sprintf(gorushSite, syncPort, "sync", conformance.Serve(t, syncMock))+
		fmt.Sprintf(gorushSite, asyncPort, "async", conformance.Serve(t, asyncMock)))
	defer gw.Healthy(t)

	for _, mode := range []struct {
		name string
		mock *conformance.Gorush
		port int
	}{{"sync", syncMock, syncPort}, {"async", asyncMock, asyncPort}} {
		t.Run(mode.name, func(t *testing.T) {
			c := gorushClient{t, fmt.Sprintf("http://127.0.0.1:%d", mode.port)}
			android := func(id, message string, tokens ...string) gorush.PushNotification {
				return gorush.PushNotification{ID: id, Tokens: tokens, Platform: gorush.PlatFormAndroid, Message: message}
			}
			ios := func(message string, tokens ...string) gorush.PushNotification {
				return gorush.PushNotification{Tokens: tokens, Platform: gorush.PlatFormIos, Message: message, Alert: gorush.Alert{Title: "hi"}}
			}

			// a, b and c twice each: under the cap.
			for i := 0; i < 2; i++ {
				r := c.push(android("n1", "sale", "a", "b"), ios("news", "c"))
				if r.status != http.StatusOK || r.ok.Counts != 3 || len(r.ok.Logs) != 0 || r.ok.Success != "ok" {
					t.Fatalf("push %d under the cap: %d %s", i+1, r.status, r.body)
				}
			}

			// a and c are capped; d and bad-e go on, and gorush itself
			// fails bad-e in sync mode.
			r := c.push(android("n3", "sale", "a", "d", "bad-e"), ios("news", "c"))
			if r.status != http.StatusOK || r.ok.Success != "ok" {
				t.Fatalf("partly capped: %d %s", r.status, r.body)
			}
			t.Logf("partly capped: %s", r.body)
			var want []gorush.LogPushEntry
			if mode.mock.Sync {
				want = append(want, gorush.LogPushEntry{ID: "n3", Type: gorush.FailedPush, Platform: "android", Token: "bad-e", Message: "sale", Error: "BadDeviceToken"})
			}
			want = append(want,
				gorush.LogPushEntry{ID: "n3", Type: gorush.FailedPush, Platform: "android", Token: "a", Message: "sale", Error: "frequency cap token_minute"},
				gorush.LogPushEntry{Type: gorush.FailedPush, Platform: "ios", Token: "c", Message: "news", Error: "frequency cap token_minute"})
			if r.ok.Counts != 4 || !sameLogs(r.ok.Logs, want) {
				t.Errorf("partly capped: counts %d, logs %s; want counts 4 (2 sent, 2 capped), logs %s with a retry in each capped one's error",
					r.ok.Counts, jsonString(r.ok.Logs), jsonString(want))
			}
			if got := r.header.Get("Frequency-Cap-Dropped"); got != `"notifications.0.tokens.0", "notifications.1.tokens.0"` {
				t.Errorf("Frequency-Cap-Dropped %q", got)
			}
			pushes := mode.mock.Pushes()
			if last := pushes[len(pushes)-1]; len(last.Notifications) != 1 || !slices.Equal(last.Notifications[0].Tokens, []string{"d", "bad-e"}) || last.Notifications[0].ID != "n3" {
				t.Errorf("gorush got %s, want n3 to d and bad-e alone", jsonString(last))
			}

			// Every token capped: the gateway answers, gorush is not called.
			calls := mode.mock.Len()
			r = c.push(android("n4", "again", "a", "b"), ios("news", "c"))
			want = []gorush.LogPushEntry{
				{ID: "n4", Type: gorush.FailedPush, Platform: "android", Token: "a", Message: "again", Error: "frequency cap token_minute"},
				{ID: "n4", Type: gorush.FailedPush, Platform: "android", Token: "b", Message: "again", Error: "frequency cap token_minute"},
				{Type: gorush.FailedPush, Platform: "ios", Token: "c", Message: "news", Error: "frequency cap token_minute"},
			}
			if r.status != http.StatusOK || r.ok.Counts != 3 || r.ok.Success != "ok" || !sameLogs(r.ok.Logs, want) {
				t.Errorf("all capped: %d %s, want 200, counts 3, logs %s", r.status, r.body, jsonString(want))
			}
			if ct := r.header.Get("Content-Type"); ct != "application/json; charset=utf-8" || r.header.Get("Retry-After") == "" {
				t.Errorf("all capped: Content-Type %q, Retry-After %q", ct, r.header.Get("Retry-After"))
			}
			if mode.mock.Len() != calls {
				t.Error("an all-capped push reached gorush")
			}

			if got := mode.mock.Tokens(); !slices.Equal(got, []string{"a", "b", "c", "a", "b", "c", "d", "bad-e"}) {
				t.Errorf("gorush got tokens %v, want exactly the admitted ones", got)
			}

			// The gateway's own errors, as gorush writes its own.
			r = c.post([]byte(`{"notifications":[`))
			if r.status != http.StatusBadRequest || r.err.Code != http.StatusBadRequest || !strings.Contains(r.err.Message, "not valid JSON") {
				t.Errorf("a body that is not JSON: %d %s", r.status, r.body)
			}
			r = c.push(android("", "many", "1", "2", "3", "4", "5", "6", "7", "8", "9", "10", "11"))
			if r.status != http.StatusRequestEntityTooLarge || r.err.Code != http.StatusRequestEntityTooLarge || r.err.Message == "" {
				t.Errorf("past max_batch: %d %s", r.status, r.body)
			}
			if mode.mock.Len() != calls {
				t.Error("a push the gateway refused reached gorush")
			}
		})
	}
}

// sameLogs compares logs, an error wanted as "frequency cap <rule>"
// matching "frequency cap <rule>: retry in <n> s" for any n of 1 to 60.
func sameLogs(got, want []gorush.LogPushEntry) bool {
	if len(got) != len(want) {
		return false
	}
	for i, g := range got {
		w := want[i]
		if rule, ok := strings.CutPrefix(w.Error, "frequency cap "); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimPrefix(g.Error, "frequency cap "+rule+": retry in "), " s"))
			if err != nil || n < 1 || n > 60 || !strings.HasSuffix(g.Error, " s") {
				return false
			}
			w.Error = g.Error
		}
		if g != w {
			return false
		}
	}
	return true
}
